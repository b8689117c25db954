//! Approvals against the real proxy (`[network] unlisted = "ask"`): the agent asks for a
//! host no rule lists, is refused at once with the item's id and nothing leaves; the
//! operator answers on the admin socket (once, for the session, or a denial with a reason)
//! and the next request gets exactly that; another session is still asked; a stale token,
//! a second answer and a flood are refused; hard denies, listed denies and secrets in a
//! name are never asked about.

use std::sync::atomic::Ordering;

use airlock_control::admin::{AnswerRequest, ApprovalQuery, ReloadRequest, Request, Response};
use airlock_proxy::limits::Limits;

use crate::admin::{call, response};
use crate::common::{
    ALLOWED_IP, Extra, Harness, as_nobody, from_session, http_server, refused_in_tunnel, request,
    route,
};

async fn asking(routes: &[(std::net::SocketAddr, std::net::SocketAddr)]) -> Harness {
    asking_with(routes, None).await
}

/// As [`asking`], the grants kept in `grants_file` when one is given.
async fn asking_with(
    routes: &[(std::net::SocketAddr, std::net::SocketAddr)],
    grants_file: Option<std::path::PathBuf>,
) -> Harness {
    let names: &[(&str, &[&str])] = &[
        ("ask.test", &[ALLOWED_IP]),
        ("other.test", &[ALLOWED_IP]),
        ("evil.test", &[ALLOWED_IP]),
    ];
    Harness::start_extra(
        "enforce",
        names,
        routes,
        Limits::default(),
        &Extra {
            admin: true,
            policy: "unlisted = \"ask\"\n".into(),
            grants_file,
            ..Extra::default()
        },
    )
    .await
}

fn get(host: &str) -> String {
    format!("GET http://{host}/x HTTP/1.1\r\nhost: {host}\r\n\r\n")
}

async fn answer(h: &Harness, a: AnswerRequest) -> (u16, Response) {
    let (status, body) = call(h.admin.as_ref().unwrap(), &Request::Answer(a)).await;
    (status, response(&body))
}

/// The operator's approval of item `id` with `scope`.
fn approval(id: &str, scope: &str) -> AnswerRequest {
    AnswerRequest {
        id: id.to_owned(),
        approve: true,
        scope: Some(scope.into()),
        ..AnswerRequest::default()
    }
}

async fn inbox(h: &Harness) -> Vec<airlock_control::admin::Approval> {
    let (status, body) = call(h.admin.as_ref().unwrap(), &Request::Approvals).await;
    assert_eq!(status, 200);
    match response(&body) {
        Response::Approvals(a) => a.items,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn attack_an_asked_host_sends_nothing_until_the_operator_answers_and_gets_that_answer() {
    let (up, mut heads) = http_server().await;
    let mut h = asking(&[route(ALLOWED_IP, 80, up)]).await;
    let sock = h.admin.clone().unwrap();

    // Asked: refused at once, the item named, nothing dialed.
    let (_s, r) = request(h.addr, &get("ask.test")).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("approval-required")
    );
    let j = r.json();
    let id = j["approval_id"].as_str().unwrap().to_owned();
    assert!(
        j["next_steps"]
            .as_str()
            .unwrap()
            .contains(&format!("airlock approve {id}")),
        "{j}"
    );
    // Again: the same item, one more hit. HTTPS to it is another port: another item.
    let (_s, r) = request(h.addr, &get("ask.test")).await;
    assert_eq!(r.json()["approval_id"], id.as_str());
    let r = refused_in_tunnel(&h, "ask.test", 443).await;
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("approval-required")
    );
    assert_ne!(r.json()["approval_id"], id.as_str());
    assert_eq!(
        h.connects.load(Ordering::SeqCst),
        0,
        "nothing was dialed while pending"
    );
    assert!(heads.try_recv().is_err());

    // The inbox, pending first, with the session and the hits.
    let items = inbox(&h).await;
    let item = items.iter().find(|i| i.id == id).unwrap();
    assert_eq!(
        (item.host.as_str(), item.port, item.hits),
        ("ask.test", 80, 2)
    );
    assert_eq!(item.state, "pending");
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    assert_eq!(item.session, format!("uid {me}"));

    // A stale token is refused and changes nothing; the token shown is taken.
    let (status, body) = call(&sock, &Request::Approval(ApprovalQuery { id: id.clone() })).await;
    assert_eq!(status, 200);
    let Response::Approval(shown) = response(&body) else {
        panic!()
    };
    let token = shown.token.unwrap();
    let once = |token: &str| AnswerRequest {
        id: id.clone(),
        approve: true,
        scope: Some("once".into()),
        token: Some(token.to_owned()),
        ..AnswerRequest::default()
    };
    let (status, r) = answer(&h, once("0000000000000000")).await;
    assert_eq!(status, 409, "{r:?}");
    let (status, r) = answer(&h, once(&token)).await;
    assert_eq!(status, 200, "{r:?}");
    let Response::Approval(a) = r else { panic!() };
    assert_eq!((a.state.as_str(), a.by), ("approved", Some(me)));
    // Answered: a second answer is refused.
    let (status, _) = answer(&h, once(&token)).await;
    assert_eq!(status, 409);

    // Once: the next request goes through, the one after is asked again (a new item).
    let (_s, r) = request(h.addr, &get("ask.test")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(heads.recv().await.unwrap().starts_with("GET /x "));
    let (_s, r) = request(h.addr, &get("ask.test")).await;
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("approval-required")
    );
    let second = r.json()["approval_id"].as_str().unwrap().to_owned();
    assert_ne!(second, id);

    // A denial's reason reaches the agent, and nothing is sent.
    let deny = AnswerRequest {
        id: second.clone(),
        approve: false,
        reason: Some("use the internal mirror".into()),
        ..AnswerRequest::default()
    };
    let (status, r) = answer(&h, deny).await;
    assert_eq!(status, 200, "{r:?}");
    let (_s, r) = request(h.addr, &get("ask.test")).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("approval-denied")
    );
    assert!(
        r.json()["rule"]
            .as_str()
            .unwrap()
            .ends_with("use the internal mirror"),
        "{}",
        r.body
    );
    assert!(heads.try_recv().is_err());
    // A denial without a reason is refused.
    let (status, _) = answer(
        &h,
        AnswerRequest {
            id: second.clone(),
            approve: false,
            ..AnswerRequest::default()
        },
    )
    .await;
    assert_eq!(status, 400);

    let lines = h.finish().await;
    let answered: Vec<_> = lines
        .iter()
        .filter(|l| l["event"] == "approval-answered")
        .collect();
    assert_eq!(answered.len(), 2, "{answered:?}");
    assert_eq!(answered[0]["approval"], id.as_str());
    assert_eq!(answered[0]["rule"], format!("approved once by uid {me}"));
    assert_eq!(answered[0]["decision"], "allow");
    assert_eq!(
        answered[1]["rule"],
        format!("denied by uid {me}: use the internal mirror")
    );
    let asked = lines
        .iter()
        .filter(|l| l["reason"] == "approval-required" && l["approval"] == id.as_str())
        .count();
    assert_eq!(asked, 2, "each refusal names its item");
    let granted = lines
        .iter()
        .find(|l| {
            l["decision"] == "allow" && l["host"] == "ask.test" && l["event"] != "approval-answered"
        })
        .unwrap();
    assert_eq!(granted["rule"], format!("approval {id} (once)"));
}

#[tokio::test]
async fn an_approval_for_one_session_leaves_another_session_asked() {
    let (up, _heads) = http_server().await;
    let mut h = asking(&[route(ALLOWED_IP, 80, up)]).await;
    let (_s, r) = request(h.addr, &get("ask.test")).await;
    let id = r.json()["approval_id"].as_str().unwrap().to_owned();
    let (status, r) = answer(
        &h,
        AnswerRequest {
            id,
            approve: true,
            scope: Some("session".into()),
            for_seconds: Some(600),
            ..AnswerRequest::default()
        },
    )
    .await;
    assert_eq!(status, 200, "{r:?}");
    for _ in 0..3 {
        let (_s, r) = request(h.addr, &get("ask.test")).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    // Another session (a process running as nobody; root switches to it) is still asked.
    let raw = "GET http://ask.test/x HTTP/1.1\r\nhost: ask.test\r\nconnection: close\r\n\r\n";
    let text = as_nobody(h.addr, raw).await;
    assert!(
        text.contains("x-airlock-error: approval-required"),
        "{text}"
    );
    let items = inbox(&h).await;
    assert!(
        items
            .iter()
            .any(|i| i.session == "uid 65534" && i.state == "pending"),
        "{items:?}"
    );
    h.finish().await;
}

/// Two sessions of one uid (the appliance's agent and an `airlock exec`), told apart by the
/// address the firewall gives each: session 2 is approved `--session`, session 3 of the
/// same uid is still asked and files its own item; every line names its session and the
/// agent's uid; each session reads only its own denials.
#[tokio::test]
async fn attack_an_approval_for_one_session_of_a_uid_leaves_its_other_sessions_asked() {
    let (up, _heads) = http_server().await;
    let mut h = asking(&[route(ALLOWED_IP, 80, up)]).await;
    let (_s, r) = from_session(2, h.addr, &get("ask.test")).await;
    assert_eq!(r.status, 403, "{}", r.body);
    let id = r.json()["approval_id"].as_str().unwrap().to_owned();
    let items = inbox(&h).await;
    assert!(
        items.iter().any(|i| i.id == id && i.session == "session 2"),
        "{items:?}"
    );
    let (status, r) = answer(&h, approval(&id, "session")).await;
    assert_eq!(status, 200, "{r:?}");
    let (_s, r) = from_session(2, h.addr, &get("ask.test")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // Session 3: the same uid, another session. Its ask is its own.
    let (_s, r) = from_session(3, h.addr, &get("ask.test")).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.json()["error"], "approval-required", "{}", r.body);
    let theirs = r.json()["approval_id"].as_str().unwrap().to_owned();
    assert_ne!(theirs, id);
    let items = inbox(&h).await;
    assert!(
        items
            .iter()
            .any(|i| i.id == theirs && i.session == "session 3" && i.state == "pending"),
        "{items:?}"
    );
    // Session 3 does not see session 2's refusal among its denials, nor 2 session 3's.
    let mut mine = Vec::new();
    for _ in 0..50 {
        let (_s, r) = from_session(3, h.addr, &api_get("/v1/denials")).await;
        mine = r.json()["denials"].as_array().unwrap().clone();
        if !mine.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert_eq!(mine[0]["approval"], theirs.as_str());
    let (_s, r) = from_session(2, h.addr, &api_get("/v1/denials")).await;
    let twos = r.json()["denials"].as_array().unwrap().clone();
    assert!(
        twos.iter().all(|d| d["approval"] == id.as_str()) && twos.len() == 1,
        "{twos:?}"
    );
    let uid = nix::unistd::getuid().as_raw();
    let lines = h.finish().await;
    let asked: Vec<_> = lines
        .iter()
        .filter(|l| l["host"] == "ask.test" && l["event"] != "approval-answered")
        .collect();
    assert!(asked.len() >= 3, "{asked:?}");
    for l in &asked {
        assert_eq!(l["uid"], uid, "{l}");
        assert!(l["agent_session"] == 2 || l["agent_session"] == 3, "{l}");
        let k = l["agent_session"].as_u64().unwrap();
        assert!(
            l["client"]
                .as_str()
                .unwrap()
                .starts_with(&format!("127.77.0.{k}:")),
            "{l}"
        );
    }
}

#[tokio::test]
async fn hard_denies_listed_denies_and_secret_names_are_never_asked_about_and_an_encoded_name_carries_a_note()
 {
    let mut h = asking(&[]).await;
    for (raw, reason) in [
        (get("bad.allowed.test"), "denied-by-rule"),
        (get("169.254.169.254"), "blocked-metadata-address"),
        (get("198.51.100.7"), "blocked-ip-literal"),
        (get("allowed.test:2222"), "blocked-port"),
        // A GitHub token split over labels: a secret in the name is refused, never filed.
        (
            get("ghp_aaaabbbbccccddddeeee.ffffgggghhhh1234.ask.test"),
            "foreign-secret",
        ),
        // More labels than the runs searched: a likely channel, refused.
        (
            get("a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.ask.test"),
            "dns-exfil-suspect",
        ),
    ] {
        let (_s, r) = request(h.addr, &raw).await;
        assert_eq!(
            r.header("x-airlock-error").as_deref(),
            Some(reason),
            "{raw}"
        );
        assert!(r.json().get("approval_id").is_none(), "{raw}: {}", r.body);
    }
    assert!(inbox(&h).await.is_empty(), "nothing was filed");
    // A name whose labels look encoded is the operator's to weigh: filed, with a note.
    let (_s, r) = request(
        h.addr,
        &get("0123456789abcdef0123456789abcdef0123456789abcdef.ask.test"),
    )
    .await;
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("approval-required")
    );
    let items = inbox(&h).await;
    assert!(
        items[0]
            .notes
            .iter()
            .any(|n| n.contains("looks like it carries encoded data")),
        "{items:?}"
    );
    assert_eq!(h.connects.load(Ordering::SeqCst), 0);
    h.finish().await;
}

#[tokio::test]
async fn a_flood_of_asks_stops_at_the_cap_and_a_reload_that_lists_a_host_drops_its_item() {
    let mut h = asking(&[]).await;
    let cap = airlock_policy::limits::DEFAULT_APPROVALS_PENDING as usize;
    for i in 0..cap {
        let (_s, r) = request(h.addr, &get(&format!("h{i}.test"))).await;
        assert!(r.json()["approval_id"].is_string(), "{i}: {}", r.body);
    }
    let (_s, r) = request(h.addr, &get("one-more.test")).await;
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("approval-required")
    );
    assert!(r.json().get("approval_id").is_none(), "{}", r.body);
    assert!(
        r.json()["rule"]
            .as_str()
            .unwrap()
            .contains("wait for the operator"),
        "{}",
        r.body
    );
    assert_eq!(inbox(&h).await.len(), cap);
    // The dry run says the host would be asked about, and files nothing.
    let sock = h.admin.clone().unwrap();
    let q = airlock_control::admin::CheckQuery {
        url: "http://dry.test/".into(),
        method: None,
    };
    let (_, body) = call(&sock, &Request::Check(q)).await;
    let Response::Checked(c) = response(&body) else {
        panic!()
    };
    assert_eq!(c.reason.as_deref(), Some("approval-required"));
    assert!(c.message.contains("asks about such hosts"), "{}", c.message);
    assert_eq!(inbox(&h).await.len(), cap);

    // A reload listing h0.test decides it: its pending item goes.
    let text = std::fs::read_to_string(&h.policy_path)
        .unwrap()
        .replace("\"readonly.test\"", "\"readonly.test\", \"h0.test\"");
    reload(&sock, text).await;
    let items = inbox(&h).await;
    assert_eq!(items.len(), cap - 1);
    assert!(items.iter().all(|i| i.host != "h0.test"));
    h.finish().await;
}

fn api_post(body: &str) -> String {
    format!(
        "POST http://airlock.local/v1/ask HTTP/1.1\r\nhost: airlock.local\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn api_get(path: &str) -> String {
    format!("GET http://airlock.local{path} HTTP/1.1\r\nhost: airlock.local\r\n\r\n")
}

#[tokio::test]
async fn the_agent_reads_its_rules_asks_ahead_with_a_reason_and_waits_for_the_answer() {
    let mut h = asking(&[]).await;
    // Its rules, without credentials.
    let (_s, r) = request(h.addr, &api_get("/v1/policy")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let p = r.json();
    assert_eq!(p["unlisted"], "ask");
    assert!(
        p["allow"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "allowed.test"),
        "{p}"
    );
    // The same as the page the agents' wrappers put where each CLI reads its instructions.
    let (_s, r) = request(h.addr, &api_get("/v1/brief")).await;
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("text/markdown; charset=utf-8")
    );
    for want in [
        "# You are working inside an airlock sandbox",
        "`allowed.test`",
        "You may also write to (any method): `allowed.test`",
        "Refused although matched above: `bad.allowed.test`",
        "`403 approval-required`",
        "airlock-request HOST --reason",
    ] {
        assert!(r.body.contains(want), "{want:?} in {}", r.body);
    }

    // Asking is judged as the admission would: a listed host is allowed, a listed deny and
    // a hard deny are refused and never filed.
    let (_s, r) = request(h.addr, &api_post(r#"{"host": "allowed.test"}"#)).await;
    assert_eq!(
        (r.status, r.json()["state"].clone()),
        (200, "allowed".into())
    );
    let (_s, r) = request(h.addr, &api_post(r#"{"host": "bad.allowed.test"}"#)).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["reason"], "denied-by-rule");
    let (_s, r) = request(
        h.addr,
        &api_post(r#"{"host": "169.254.169.254", "port": 80}"#),
    )
    .await;
    assert_eq!(r.json()["reason"], "blocked-metadata-address");
    let (_s, r) = request(h.addr, &api_post(r#"{"port": 80}"#)).await;
    assert_eq!(r.status, 400);
    assert!(inbox(&h).await.is_empty());

    // An unlisted host with a reason: filed for this session, the reason kept as its text
    // (control characters dropped), shown to the operator as the agent's words.
    let (_s, r) = request(
        h.addr,
        &api_post(r#"{"host": "pypi.test", "reason": "pip install\u001b[2J needs the index"}"#),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let id = r.json()["approval_id"].as_str().unwrap().to_owned();
    let items = inbox(&h).await;
    assert_eq!(
        items[0].said.as_deref(),
        Some("pip install[2J needs the index")
    );
    assert_eq!((items[0].host.as_str(), items[0].port), ("pypi.test", 443));

    // Another session cannot see it, nor wait on it.
    let raw = format!(
        "GET http://airlock.local/v1/ask/{id} HTTP/1.1\r\nhost: airlock.local\r\nconnection: close\r\n\r\n"
    );
    let other = as_nobody(h.addr, &raw).await;
    assert!(other.starts_with("HTTP/1.1 404"), "{other}");

    // The wait returns as soon as the operator answers.
    let addr = h.addr;
    let waiting = tokio::spawn({
        let path = format!("/v1/ask/{id}?wait=30");
        async move {
            let started = std::time::Instant::now();
            let (_s, r) = request(addr, &api_get(&path)).await;
            (r, started.elapsed())
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let (status, _) = answer(&h, approval(&id, "session")).await;
    assert_eq!(status, 200);
    let (r, took) = waiting.await.unwrap();
    assert_eq!(r.json()["state"], "approved", "{}", r.body);
    assert_eq!(r.json()["scope"], "session");
    assert!(took < std::time::Duration::from_secs(10), "{took:?}");
    // Asking again now: approved.
    let (_s, r) = request(h.addr, &api_post(r#"{"host": "pypi.test"}"#)).await;
    assert_eq!(r.json()["state"], "approved", "{}", r.body);

    // A wait nobody answers ends pending; a wait past 120 s is refused.
    let (_s, r) = request(h.addr, &api_post(r#"{"host": "slow.test"}"#)).await;
    let slow = r.json()["approval_id"].as_str().unwrap().to_owned();
    let (_s, r) = request(h.addr, &api_get(&format!("/v1/ask/{slow}?wait=1"))).await;
    assert_eq!(r.json()["state"], "pending");
    let (_s, r) = request(h.addr, &api_get(&format!("/v1/ask/{slow}?wait=121"))).await;
    assert_eq!(r.status, 400);
    // The API is plain HTTP: a tunnel to it is refused, never filed.
    let (_s, r) = request(h.addr, "CONNECT airlock.local:443 HTTP/1.1\r\n\r\n").await;
    assert_eq!(r.status, 400);

    assert_eq!(h.connects.load(Ordering::SeqCst), 0, "nothing was dialed");
    let lines = h.finish().await;
    let filed = lines
        .iter()
        .find(|l| l["method"] == "ASK" && l["approval"] == id.as_str())
        .unwrap();
    assert_eq!(filed["reason"], "approval-required");
    assert_eq!(
        filed["rule"],
        "asked ahead of need: pip install[2J needs the index"
    );
    assert!(
        lines.iter().all(|l| l["host"] != "airlock.local"),
        "the API itself is no destination"
    );
}

/// The DNS filter's side of an approval: an asked name does not resolve until the operator
/// approves it for the session, and then only for that session's uid.
#[tokio::test]
async fn an_approved_name_resolves_for_its_session_only() {
    use crate::dns::{query, udp};
    use hickory_proto::op::ResponseCode;
    use hickory_proto::rr::RecordType;
    let mut h = asking(&[]).await;
    let before = udp(&h, &query("ask.test.", RecordType::A)).await.unwrap();
    assert_eq!(before.response_code, ResponseCode::NXDomain);
    assert!(inbox(&h).await.is_empty(), "a DNS question files no item");
    let (_s, r) = request(h.addr, &get("ask.test")).await;
    let id = r.json()["approval_id"].as_str().unwrap().to_owned();
    let (status, _) = answer(&h, approval(&id, "session")).await;
    assert_eq!(status, 200);
    let after = udp(&h, &query("ask.test.", RecordType::A)).await.unwrap();
    assert_eq!(after.response_code, ResponseCode::NoError);
    assert_eq!(after.answers.len(), 1, "{after:?}");
    // Another uid asks the same name: still refused.
    let port = h.dns.port();
    let out = tokio::task::spawn_blocking(move || {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("dig")
            .args([
                "+tries=1",
                "+time=2",
                "-p",
                &port.to_string(),
                "@127.0.0.1",
                "ask.test",
                "A",
            ])
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("status: NXDOMAIN"), "{text}");
    h.finish().await;
}

/// `GET /v1/denials`: the session reads its own latest refusals (what it sent, why, the
/// rule, the item), newest last; another session (uid 65534) reads none of them, and its
/// own refusal is not shown to the first.
#[tokio::test]
async fn the_agent_reads_its_own_recent_denials_and_no_other_sessions() {
    let mut h = asking(&[]).await;
    let (_s, r) = request(h.addr, &get("bad.allowed.test")).await;
    assert_eq!(r.status, 403, "{}", r.body);
    let (_s, r) = request(h.addr, &get("ask.test")).await;
    let id = r.json()["approval_id"].as_str().unwrap().to_owned();
    let nobody = as_nobody(
        h.addr,
        "GET http://other.test/secret-path HTTP/1.1\r\nhost: other.test\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(nobody.contains("approval-required"), "{nobody}");
    // The audit writer publishes after write(2): give it its turn.
    let mut denials = Vec::new();
    for _ in 0..50 {
        let (_s, r) = request(h.addr, &api_get("/v1/denials")).await;
        assert_eq!(r.status, 200, "{}", r.body);
        denials = r.json()["denials"].as_array().unwrap().clone();
        if denials.len() >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(denials.len(), 2, "{denials:?}");
    assert_eq!(denials[0]["host"], "bad.allowed.test");
    assert_eq!(denials[0]["reason"], "denied-by-rule");
    assert_eq!(denials[0]["path"], "/x");
    assert_eq!(denials[1]["host"], "ask.test");
    assert_eq!(denials[1]["reason"], "approval-required");
    assert_eq!(denials[1]["approval"], id.as_str());
    let keys: Vec<&String> = denials[1].as_object().unwrap().keys().collect();
    assert!(
        keys.iter().all(|k| [
            "ts", "method", "host", "port", "path", "reason", "rule", "approval"
        ]
        .contains(&k.as_str())),
        "{keys:?}"
    );
    // The other session sees its own refusal only.
    let theirs = as_nobody(
        h.addr,
        "GET http://airlock.local/v1/denials HTTP/1.1\r\nhost: airlock.local\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(
        theirs.contains("other.test")
            && !theirs.contains("ask.test")
            && !theirs.contains("bad.allowed.test"),
        "{theirs}"
    );
    h.finish().await;
}

/// `[limits] approvals_hold_seconds`: an asked request is held open for the answer instead
/// of refused at once; nothing is dialed while it is held; the operator's grant lets that
/// very request through; with no answer it is refused after the hold, saying so; past
/// `approvals_holds` held requests of the session, the next is refused at once.
#[tokio::test]
async fn attack_a_held_request_sends_nothing_until_the_answer_and_holds_are_capped() {
    let (up, mut heads) = http_server().await;
    let names: &[(&str, &[&str])] = &[("ask.test", &[ALLOWED_IP]), ("other.test", &[ALLOWED_IP])];
    let mut h = Harness::start_extra(
        "enforce",
        names,
        &[route(ALLOWED_IP, 80, up)],
        Limits::default(),
        &Extra {
            admin: true,
            policy:
                "unlisted = \"ask\"\n\n[limits]\napprovals_hold_seconds = 2\napprovals_holds = 1\n"
                    .into(),
            ..Extra::default()
        },
    )
    .await;
    let addr = h.addr;
    // Held: no answer yet, nothing dialed.
    let held = tokio::spawn(async move { request(addr, &get("ask.test")).await });
    let items = filed(&h).await;
    assert_eq!(items.len(), 1, "{items:?}");
    assert!(!held.is_finished());
    // A second request of the session while one is held: refused at once (the cap is 1).
    let started = std::time::Instant::now();
    let (_s, r) = request(h.addr, &get("other.test")).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    assert_eq!(
        h.connects.load(Ordering::SeqCst),
        0,
        "nothing dialed while held"
    );
    assert!(heads.try_recv().is_err());
    // The grant lets the held request itself through.
    let (status, r) = answer(&h, approval(&items[0].id, "once")).await;
    assert_eq!(status, 200, "{r:?}");
    let (_s, r) = held.await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        heads.try_recv().is_ok(),
        "the held request reached the upstream"
    );
    // No answer: refused after the hold, the line says it was held.
    let started = std::time::Instant::now();
    let (_s, r) = request(h.addr, &get("ask.test")).await;
    assert!(started.elapsed() >= std::time::Duration::from_secs(2));
    assert_eq!(r.status, 403, "{}", r.body);
    let j = r.json();
    assert_eq!(j["error"], "approval-required");
    assert!(j["approval_id"].is_string(), "{j}");
    assert!(j["rule"].as_str().unwrap().starts_with("held 2."), "{j}");
    h.finish().await;
}

#[tokio::test]
async fn attack_an_always_grant_is_policy_for_every_session_kept_beside_the_audit_and_revoked_by_id()
 {
    let (up, _heads) = http_server().await;
    let mut h = asking(&[route(ALLOWED_IP, 80, up)]).await;
    let sock = h.admin.clone().unwrap();
    let (_s, r) = request(h.addr, &get("ask.test")).await;
    let id = r.json()["approval_id"].as_str().unwrap().to_owned();
    let always = |approve: bool| AnswerRequest {
        id: id.clone(),
        approve,
        scope: Some("always".into()),
        ..AnswerRequest::default()
    };
    // An always answer with a time is refused: a grant holds until it is revoked.
    let (status, r) = answer(
        &h,
        AnswerRequest {
            for_seconds: Some(60),
            ..always(true)
        },
    )
    .await;
    assert_eq!(status, 400, "{r:?}");
    let before = policy_revision(&sock).await;

    let (status, r) = answer(&h, always(true)).await;
    assert_eq!(status, 200, "{r:?}");
    let Response::Approval(a) = r else { panic!() };
    assert_eq!(
        (a.state.as_str(), a.scope.as_deref()),
        ("approved", Some("always"))
    );
    // The answer came back with the new revision in force, the grant listed with who made it.
    let after = policy_revision(&sock).await;
    assert_eq!(after.revision, before.revision + 1);
    assert_ne!(after.hash, before.hash);
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let granted = after
        .rules
        .iter()
        .find(|r| r.rule == "ask.test:80")
        .unwrap_or_else(|| panic!("{:?}", after.rules));
    assert_eq!(granted.list, "network.allow");
    assert!(
        granted
            .origin
            .starts_with(&format!("approve --always {id} by uid {me} at ")),
        "{}",
        granted.origin
    );
    // Every session passes now: this one, and another (nobody) that never asked.
    let (_s, r) = request(h.addr, &get("ask.test")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let raw = "GET http://ask.test/x HTTP/1.1\r\nhost: ask.test\r\nconnection: close\r\n\r\n";
    let text = as_nobody(h.addr, raw).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");

    // Kept beside the audit log, the proxy's alone, with who and when.
    let file = h.audit_path.with_file_name(airlock_channels::GRANTS_FILE);
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // A restart of the proxy resumes this revision's number over the same text.
    let saved = airlock_proxy::revision::Saved::load(h.policy_path.parent().unwrap()).unwrap();
    assert_eq!(saved.revision, after.revision);
    assert_eq!(saved.text, std::fs::read_to_string(&h.policy_path).unwrap());
    let kept = airlock_proxy::grants::load(&file).unwrap();
    let g = kept.get(&id).unwrap();
    assert_eq!(
        (g.allow, g.host.as_str(), g.port, g.by),
        (true, "ask.test", 80, me)
    );

    // Revoked by id: a new revision without it; the host is asked about again.
    let revoke =
        |id: &str| Request::Revoke(airlock_control::admin::RevokeRequest { id: id.to_owned() });
    let (status, _) = call(&sock, &revoke("00000000")).await;
    assert_eq!(status, 404);
    let (status, body) = call(&sock, &revoke(&id)).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let items = inbox(&h).await;
    let item = items.iter().find(|i| i.id == id).unwrap();
    assert_eq!(
        (item.state.as_str(), item.by),
        ("revoked", Some(me)),
        "the inbox says the grant was taken back"
    );
    assert_eq!(policy_revision(&sock).await.hash, before.hash);
    assert!(
        airlock_proxy::grants::load(&file)
            .unwrap()
            .grants
            .is_empty()
    );
    let (_s, r) = request(h.addr, &get("ask.test")).await;
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("approval-required"),
        "{}",
        r.body
    );

    // Deny always: every session refused by the policy, the operator's reason kept.
    let id2 = r.json()["approval_id"].as_str().unwrap().to_owned();
    let (status, r) = answer(
        &h,
        AnswerRequest {
            id: id2.clone(),
            reason: Some("use the mirror".into()),
            ..AnswerRequest {
                id: id2.clone(),
                approve: false,
                scope: Some("always".into()),
                ..AnswerRequest::default()
            }
        },
    )
    .await;
    assert_eq!(status, 200, "{r:?}");
    let text = as_nobody(h.addr, raw).await;
    assert!(text.starts_with("HTTP/1.1 403"), "{text}");
    assert!(!text.contains("approval-required"), "{text}");
    // The operator's reason reaches the agent, in the refusal's rule.
    assert!(
        text.contains("ask.test:80: denied by the operator: use the mirror"),
        "{text}"
    );
    let g = airlock_proxy::grants::load(&file).unwrap();
    assert_eq!(g.get(&id2).unwrap().why.as_deref(), Some("use the mirror"));
    // A reload of the operator's file keeps the grants over the new text.
    let text = std::fs::read_to_string(&h.policy_path)
        .unwrap()
        .replace("\"readonly.test\"", "\"readonly.test\", \"h9.test\"");
    reload(&sock, text).await;
    let text = as_nobody(h.addr, raw).await;
    assert!(text.starts_with("HTTP/1.1 403"), "{text}");
    assert!(
        policy_revision(&sock)
            .await
            .rules
            .iter()
            .any(|r| r.list == "network.deny"
                && r.origin.starts_with(&format!("deny --always {id2}"))),
        "the deny grant outlives the reload"
    );

    // Each grant and revocation is a reload line naming it and who, before the answer's.
    let lines = h.finish().await;
    let reloads: Vec<&str> = lines
        .iter()
        .filter(|l| l["event"] == "reload")
        .filter_map(|l| l["origin"].as_str())
        .collect();
    assert_eq!(reloads.len(), 4, "{reloads:?}");
    assert!(reloads[0].starts_with(&format!("approve --always {id} (ask.test:80) by uid {me}")));
    assert!(reloads[1].starts_with(&format!("revoke approve --always {id}")));
    assert!(reloads[2].starts_with(&format!("deny --always {id2}")));
    let answered = lines
        .iter()
        .position(|l| l["event"] == "approval-answered" && l["approval"] == id.as_str())
        .unwrap();
    let reload = lines.iter().position(|l| l["event"] == "reload").unwrap();
    assert!(
        reload < answered,
        "the grant is in force before it is answered"
    );
}

async fn policy_revision(sock: &std::path::Path) -> airlock_control::admin::PolicyRevision {
    let (status, body) = call(sock, &Request::Policy).await;
    assert_eq!(status, 200);
    match response(&body) {
        Response::Policy(p) => p,
        other => panic!("{other:?}"),
    }
}

/// Sandboxes that share one grants file (a template's shared audit claim): a grant made in
/// one is not lost to a grant made later in another that read the file before it, and that
/// later grant puts the first in force there too.
#[tokio::test]
async fn attack_a_grant_in_one_sandbox_is_not_lost_to_a_later_grant_in_another_sharing_the_file() {
    let shared = tempfile::tempdir().unwrap();
    let file = shared.path().join(airlock_channels::GRANTS_FILE);
    let (up, _heads) = http_server().await;
    let routes = [route(ALLOWED_IP, 80, up)];
    let mut a = asking_with(&routes, Some(file.clone())).await;
    let mut b = asking_with(&routes, Some(file.clone())).await;
    let grant = |h: &Harness, host: &'static str| {
        let (addr, admin) = (h.addr, h.admin.clone().unwrap());
        async move {
            let (_s, r) = request(addr, &get(host)).await;
            let id = r.json()["approval_id"].as_str().unwrap().to_owned();
            let always = approval(&id, "always");
            let (status, body) = call(&admin, &Request::Answer(always)).await;
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        }
    };
    // A grants ask.test; B, which read the file before that, grants other.test.
    grant(&a, "ask.test").await;
    grant(&b, "other.test").await;
    let kept = airlock_proxy::grants::load(&file).unwrap();
    let mut hosts: Vec<&str> = kept.grants.iter().map(|g| g.host.as_str()).collect();
    hosts.sort_unstable();
    assert_eq!(hosts, ["ask.test", "other.test"], "no grant is lost");
    // B's revision carries A's grant too: ask.test passes there without asking.
    let (_s, r) = request(b.addr, &get("ask.test")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // A reload in A lays the file's grants over its text: B's grant is in force in A.
    let sock_a = a.admin.clone().unwrap();
    reload(&sock_a, std::fs::read_to_string(&a.policy_path).unwrap()).await;
    let (_s, r) = request(a.addr, &get("other.test")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // And A can take back the grant B made: it is the file's, not only B's.
    let b_grant = kept.grants.iter().find(|g| g.host == "other.test").unwrap();
    let revoke = Request::Revoke(airlock_control::admin::RevokeRequest {
        id: b_grant.id.clone(),
    });
    let (status, body) = call(&sock_a, &revoke).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let left = airlock_proxy::grants::load(&file).unwrap();
    let hosts: Vec<&str> = left.grants.iter().map(|g| g.host.as_str()).collect();
    assert_eq!(hosts, ["ask.test"]);
    a.finish().await;
    b.finish().await;
}

/// A proxy in `mode` whose `allowed.test` (upstream `up`) takes reads and asks the operator
/// about `POST /releases` (the rule `publish`); `network` goes into `[network]` first.
async fn publishing(mode: &str, network: &str, up: std::net::SocketAddr) -> Harness {
    let rules = format!(
        "{network}\n[[rules]]\nhost = \"allowed.test\"\nmethod = \"GET\"\npath = \"/**\"\naction = \"allow\"\n\n[[rules]]\nname = \"publish\"\nhost = \"allowed.test\"\nmethod = \"POST\"\npath = \"/releases\"\naction = \"ask\"\n"
    );
    Harness::start_extra(
        mode,
        &[("allowed.test", &[ALLOWED_IP]), ("ask.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up)],
        Limits::default(),
        &Extra {
            admin: true,
            policy: rules,
            ..Extra::default()
        },
    )
    .await
}

/// `action = "ask"` on a `[[rules]]` rule: a request it matches is put to the operator for
/// the session that sent it, apart from the host (which stays allowed); an approval lets
/// exactly that rule's requests through, another session is still asked, a grant is refused
/// for it, and a reload that drops the rule drops its pending items.
#[tokio::test]
async fn attack_an_ask_rule_holds_its_requests_for_the_operator_and_nothing_else() {
    let (up, mut heads) = http_server().await;
    let mut h = publishing("enforce", "", up).await;
    let post = |path: &str| {
        format!(
            "POST http://allowed.test{path} HTTP/1.1\r\nhost: allowed.test\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        )
    };
    // Asked: refused at once with the item, nothing sent upstream.
    let (_s, r) = request(h.addr, &post("/releases")).await;
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("approval-required"),
        "{}",
        r.body
    );
    let id = r.json()["approval_id"].as_str().unwrap().to_owned();
    assert!(heads.try_recv().is_err(), "nothing reached the upstream");
    // The rest of the host is as the rules say: reads pass, other writes are refused.
    let (_s, r) = request(h.addr, &get("allowed.test")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let _ = heads.recv().await;
    let (_s, r) = request(h.addr, &post("/other")).await;
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("request-denied-by-rule")
    );
    let items = inbox(&h).await;
    let item = items.iter().find(|i| i.id == id).unwrap();
    assert_eq!(
        (item.host.as_str(), item.port, item.rule.as_deref()),
        ("allowed.test", 80, Some("publish"))
    );
    // It asks about a write: a note says so, which keeps it out of a bulk approve.
    assert!(
        item.notes.iter().any(|n| n.contains("asks about writes")),
        "{:?}",
        item.notes
    );
    // The agent's brief names the rule that waits for the operator.
    let (_s, r) = request(h.addr, &api_get("/v1/brief")).await;
    assert!(
        r.body.contains(
            "These requests wait for the operator: refused at once with `403 approval-required`"
        ) && r.body.contains("`publish`"),
        "{}",
        r.body
    );
    let approve = |scope: &str| approval(&id, scope);
    // A grant is for a host, not a rule's requests.
    let (status, r) = answer(&h, approve("always")).await;
    assert_eq!(status, 400, "{r:?}");
    // Approved for the session: its matching requests pass; another session is asked.
    let (status, r) = answer(&h, approve("session")).await;
    assert_eq!(status, 200, "{r:?}");
    for _ in 0..2 {
        let (_s, r) = request(h.addr, &post("/releases")).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(heads.recv().await.unwrap().starts_with("POST /releases"));
    }
    let (_s, r) = request(h.addr, &post("/other")).await;
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("request-denied-by-rule"),
        "the approval is for the rule's requests only"
    );
    let text = as_nobody(h.addr, &post("/releases")).await;
    assert!(
        text.contains("x-airlock-error: approval-required"),
        "{text}"
    );
    assert!(heads.try_recv().is_err());
    // A reload that makes the rule an allow decides it: the other session's item goes.
    let sock = h.admin.clone().unwrap();
    let text = std::fs::read_to_string(&h.policy_path)
        .unwrap()
        .replace("action = \"ask\"", "action = \"allow\"");
    reload(&sock, text).await;
    let items = inbox(&h).await;
    assert!(items.iter().all(|i| i.state != "pending"), "{items:?}");
    let lines = h.finish().await;
    let asked = lines
        .iter()
        .filter(|l| l["reason"] == "approval-required" && l["path"] == "/releases")
        .count();
    assert_eq!(asked, 2, "each asked request has its line");
}

/// Report mode lets through what a policy must list, never what the operator holds: an ask
/// rule still puts its request to the operator (nothing is sent), while a host no rule
/// lists under `unlisted = "ask"` is let through, reported, and nobody is asked about it.
#[tokio::test]
async fn attack_report_mode_does_not_open_an_ask_rule() {
    let (up, mut heads) = http_server().await;
    let mut h = publishing("report", "unlisted = \"ask\"\n", up).await;
    let post = "POST http://allowed.test/releases HTTP/1.1\r\nhost: allowed.test\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
    let (_s, r) = request(h.addr, post).await;
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("approval-required"),
        "{}",
        r.body
    );
    assert!(heads.try_recv().is_err(), "nothing reached the upstream");
    // The unlisted host: let through and reported; no item is filed for it.
    let (_s, r) = request(h.addr, &get("ask.test")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(heads.recv().await.unwrap().starts_with("GET /x"));
    let items = inbox(&h).await;
    let asked: Vec<_> = items
        .iter()
        .map(|i| (i.host.as_str(), i.rule.as_deref()))
        .collect();
    assert_eq!(asked, [("allowed.test", Some("publish"))]);
    let lines = h.finish().await;
    assert!(
        lines
            .iter()
            .any(|l| l["host"] == "ask.test" && l["decision"] == "report"),
        "{lines:?}"
    );
}

/// Loads `text` as the next policy revision through the admin socket `sock`.
async fn reload(sock: &std::path::Path, text: String) {
    let (status, body) = call(
        sock,
        &Request::Reload(ReloadRequest {
            text: Some(text),
            origin: None,
        }),
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
}

/// An answer for one host, a grant included (a policy revision), leaves the open
/// connections to another host as they were: a tunnel to a listed host carries bytes
/// before and after every answer.
#[tokio::test]
async fn answers_and_grants_for_one_host_leave_an_open_stream_to_another_intact() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let (echo, _peers) = crate::common::echo_server().await;
    let (up, _heads) = http_server().await;
    let mut h = Harness::start_extra(
        "enforce",
        &[
            ("raw.test", &[ALLOWED_IP]),
            ("ask.test", &[ALLOWED_IP]),
            ("other.test", &[ALLOWED_IP]),
        ],
        &[route(ALLOWED_IP, 443, echo), route(ALLOWED_IP, 80, up)],
        Limits::default(),
        &Extra {
            admin: true,
            policy: "unlisted = \"ask\"\n".into(),
            ..Extra::default()
        },
    )
    .await;
    let (mut stream, r) = request(h.addr, "CONNECT raw.test:443 HTTP/1.1\r\n\r\n").await;
    assert_eq!(r.status, 200);
    let ping = async |s: &mut tokio::net::TcpStream| {
        s.write_all(b"ping").await.unwrap();
        let mut b = [0u8; 4];
        tokio::time::timeout(std::time::Duration::from_secs(5), s.read_exact(&mut b))
            .await
            .expect("the stream to the other host is still open")
            .unwrap();
        assert_eq!(&b, b"ping");
    };
    ping(&mut stream).await;
    for (host, scope) in [("ask.test", "session"), ("other.test", "always")] {
        let (_s, r) = request(h.addr, &get(host)).await;
        let id = r.json()["approval_id"].as_str().unwrap().to_owned();
        let (status, r) = answer(&h, approval(&id, scope)).await;
        assert_eq!(status, 200, "{r:?}");
        let (_s, r) = request(h.addr, &get(host)).await;
        assert_eq!(r.status, 200, "{host}: {}", r.body);
        ping(&mut stream).await;
    }
    drop(stream);
    let lines = h.finish().await;
    assert!(
        !lines.iter().any(|l| l["event"] == "close-revoked"),
        "no connection was closed by an answer"
    );
}

/// A held request answered with a grant goes through: the grant is policy from then on,
/// and the request held under the revision before it is let through by its item.
#[tokio::test]
async fn a_held_request_answered_always_goes_through() {
    let (r, reached) = held_then_approved("approvals_hold_seconds = 5\n", "always").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(reached, "the held request reached the upstream");
}

/// A held request takes one rate token: decided again once answered, it is not charged a
/// second one. With a bucket of one token refilled once a second, a second charge would
/// refuse it `rate-limited` (the answer comes well inside that second; on a machine slow
/// enough for a refill in between, the test passes either way: it cannot fail falsely).
#[tokio::test]
async fn a_held_request_answered_is_charged_one_rate_token() {
    let limits = "approvals_hold_seconds = 5\nrequests_per_second = 1\nrequest_burst = 1\n";
    let (r, reached) = held_then_approved(limits, "session").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(reached, "the held request reached the upstream");
}

/// A request for `ask.test` held for the operator under `[limits]` `limits`, approved with
/// `scope` once its item is filed: what the held request got, and whether it reached the
/// upstream.
async fn held_then_approved(limits: &str, scope: &str) -> (crate::common::Resp, bool) {
    let (up, mut heads) = http_server().await;
    let mut h = Harness::start_extra(
        "enforce",
        &[("ask.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up)],
        Limits::default(),
        &Extra {
            admin: true,
            policy: format!("unlisted = \"ask\"\n\n[limits]\n{limits}"),
            ..Extra::default()
        },
    )
    .await;
    let addr = h.addr;
    let held = tokio::spawn(async move { request(addr, &get("ask.test")).await });
    let items = filed(&h).await;
    assert_eq!(items.len(), 1, "{items:?}");
    let (status, r) = answer(&h, approval(&items[0].id, scope)).await;
    assert_eq!(status, 200, "{r:?}");
    let (_s, r) = held.await.unwrap();
    let reached = heads.try_recv().is_ok();
    h.finish().await;
    (r, reached)
}

/// The inbox once something is filed in it (a request held for the operator files its
/// item as it is held), within a second.
async fn filed(h: &Harness) -> Vec<airlock_control::admin::Approval> {
    for _ in 0..100 {
        let items = inbox(h).await;
        if !items.is_empty() {
            return items;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    Vec::new()
}

/// The item id of an `approval-required` refusal `r`.
fn asked_id(r: &crate::common::Resp) -> String {
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.json()["error"], "approval-required", "{}", r.body);
    r.json()["approval_id"].as_str().unwrap().to_owned()
}

async fn begin(sock: &std::path::Path, k: u16) -> (u16, Response) {
    let b = airlock_control::admin::BeginSessionRequest { session: k };
    let (status, body) = call(sock, &Request::BeginSession(b)).await;
    (status, response(&body))
}

async fn sessions(sock: &std::path::Path) -> Vec<airlock_control::admin::Session> {
    let (status, body) = call(sock, &Request::Sessions).await;
    assert_eq!(status, 200);
    match response(&body) {
        Response::Sessions(s) => s.sessions,
        other => panic!("{other:?}"),
    }
}

/// Session numbers are reused: once session 2 has ended, the next `airlock exec` is session
/// 2 again, from the same address. Its begin (root in the container, on the admin socket)
/// drops what the ended session 2 was answered: the new one is asked again for the host the
/// old one was approved `--session` for, and its pending item is gone; session 3's approval
/// and an `always` grant (policy for every session) still hold. A peer that is not root
/// cannot begin a session (and so cannot shed a session's denials or answers). Without the
/// begin, the new session 2 would go straight through on the old one's approval.
#[tokio::test]
async fn attack_a_session_that_reuses_an_ended_sessions_number_inherits_none_of_its_answers() {
    let (up, _heads) = http_server().await;
    let mut h = asking(&[route(ALLOWED_IP, 80, up)]).await;
    let sock = h.admin.clone().unwrap();
    // The ended session 2: approved for the session, one item left pending.
    let (_s, r) = from_session(2, h.addr, &get("ask.test")).await;
    let old = asked_id(&r);
    let (status, r) = answer(&h, approval(&old, "session")).await;
    assert_eq!(status, 200, "{r:?}");
    let (_s, r) = from_session(2, h.addr, &get("ask.test")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let (_s, r) = from_session(2, h.addr, &get("other.test")).await;
    let old_pending = asked_id(&r);
    // Session 3 approved for its session; evil.test granted always, from session 2's ask.
    let (_s, r) = from_session(3, h.addr, &get("ask.test")).await;
    let threes = asked_id(&r);
    let (status, r) = answer(&h, approval(&threes, "session")).await;
    assert_eq!(status, 200, "{r:?}");
    let (_s, r) = from_session(2, h.addr, &get("evil.test")).await;
    let granted = asked_id(&r);
    let (status, r) = answer(&h, approval(&granted, "always")).await;
    assert_eq!(status, 200, "{r:?}");

    // A peer that is not root (nobody; the socket opened to it so that only the peer check
    // answers) is refused, and nothing of session 2 is dropped.
    use std::os::unix::fs::PermissionsExt as _;
    use std::os::unix::process::CommandExt as _;
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test runs a client as another uid: run the tests as root (CI does)"
    );
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::set_permissions(
        sock.parent().unwrap(),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let path = sock.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(["-sS", "--max-time", "10", "-X", "POST", "--data"])
            .arg(r#"{"session":2}"#)
            .arg("--unix-socket")
            .arg(&path)
            .arg("http://airlock/v1/sessions/begin")
            .uid(65534)
            .gid(65534)
            .output()
            .expect("curl runs (scripts/install-test-deps installs it)")
    })
    .await
    .unwrap();
    let body = String::from_utf8_lossy(&out.stdout);
    assert!(
        body.contains("\"forbidden\"") && body.contains("uid 65534"),
        "{body} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_s, r) = from_session(2, h.addr, &get("ask.test")).await;
    assert_eq!(r.status, 200, "a refused begin dropped nothing: {}", r.body);
    assert_eq!(sessions(&sock).await.len(), 1, "nothing begun");

    // Root in the container (the entrypoint; the test runs as root) begins session 2.
    let (status, r) = begin(&sock, 2).await;
    assert_eq!(status, 200, "{r:?}");
    let Response::SessionBegun(b) = r else {
        panic!("{r:?}")
    };
    assert_eq!(
        (
            b.session,
            b.dropped_pending,
            b.dropped_approvals,
            b.dropped_denials
        ),
        (2, 1, 1, 0)
    );
    // The new session 2 is asked again, with new items, and the old ones are gone.
    let (_s, r) = from_session(2, h.addr, &get("ask.test")).await;
    let new = asked_id(&r);
    assert_ne!(new, old);
    let (_s, r) = from_session(2, h.addr, &get("other.test")).await;
    assert_ne!(asked_id(&r), old_pending);
    let items = inbox(&h).await;
    assert!(
        items.iter().all(|i| i.id != old && i.id != old_pending),
        "{items:?}"
    );
    // Its own denials are its own: none of the ended session's refusals.
    let mut mine = Vec::new();
    for _ in 0..50 {
        let (_s, r) = from_session(2, h.addr, &api_get("/v1/denials")).await;
        mine = r.json()["denials"].as_array().unwrap().clone();
        if mine.iter().any(|d| d["approval"] == new.as_str()) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        mine.iter().any(|d| d["approval"] == new.as_str())
            && mine
                .iter()
                .all(|d| d["approval"] != old.as_str() && d["approval"] != old_pending.as_str()),
        "{mine:?}"
    );
    // Session 3's approval holds, and the grant admits every session, session 2 included.
    let (_s, r) = from_session(3, h.addr, &get("ask.test")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let (_s, r) = from_session(2, h.addr, &get("evil.test")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        items
            .iter()
            .any(|i| i.id == granted && i.state == "approved"),
        "the grant's record stays: {items:?}"
    );

    // The sessions: the agent's (1), and session 2 with when it began; begun again, its
    // entry is replaced, not added.
    let uid = nix::unistd::getuid().as_raw();
    let listed = sessions(&sock).await;
    let numbers: Vec<(u16, Option<u32>)> = listed.iter().map(|s| (s.number, s.uid)).collect();
    assert_eq!(numbers, vec![(1, Some(uid)), (2, Some(uid))]);
    assert_eq!(listed[1].kind, airlock_control::admin::SessionKind::Exec);
    assert_eq!(listed[1].started_at_ms, b.started_at_ms);
    assert_eq!(
        listed[1].id, listed[0].id,
        "the start's id, as on the audit lines"
    );
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let (status, r) = begin(&sock, 2).await;
    assert_eq!(status, 200, "{r:?}");
    let Response::SessionBegun(again) = r else {
        panic!("{r:?}")
    };
    assert_eq!(again.dropped_pending, 2, "the new session's two asks");
    let listed = sessions(&sock).await;
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed[1].started_at_ms, again.started_at_ms);
    assert!(again.started_at_ms > b.started_at_ms);
    // A number no second session has is refused, and begins nothing.
    for k in [0, 1, airlock_channels::MAX_SESSIONS + 1] {
        let (status, r) = begin(&sock, k).await;
        assert_eq!(status, 400, "{k}: {r:?}");
    }
    assert_eq!(sessions(&sock).await.len(), 2);
    h.finish().await;
}
