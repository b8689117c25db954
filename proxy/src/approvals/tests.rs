use super::*;

const A: Client = Client::Uid(1000);
/// The defaults of `[limits]`.
const CAPS: Caps = Caps {
    pending: 16,
    per_minute: 30,
};
const MAX_PENDING: usize = CAPS.pending;
const MAX_FILED_PER_MINUTE: u32 = CAPS.per_minute;
const B: Client = Client::Uid(1001);

fn t0() -> (Instant, SystemTime) {
    (Instant::now(), SystemTime::now())
}

fn pending_id(a: Asked) -> String {
    match a {
        Asked::Pending { id } => id,
        other => panic!("not pending: {other:?}"),
    }
}

#[test]
fn an_ask_is_filed_once_per_session_host_and_port_and_counts_its_hits() {
    let ap = Approvals::default();
    let (now, wall) = t0();
    let id = pending_id(ap.ask(A, "x.example", 443, CAPS, now, wall));
    assert_eq!(id.len(), 8);
    assert_eq!(
        ap.ask(A, "x.example", 443, CAPS, now, wall),
        Asked::Pending { id: id.clone() }
    );
    let other_port = pending_id(ap.ask(A, "x.example", 8443, CAPS, now, wall));
    let other_session = pending_id(ap.ask(B, "x.example", 443, CAPS, now, wall));
    assert!(id != other_port && id != other_session);
    assert_eq!(ap.get(&id).unwrap().hits, 2);
    assert_eq!(ap.list().len(), 3);
}

#[test]
fn approve_once_admits_one_connection_and_the_next_is_asked_again() {
    let ap = Approvals::default();
    let (now, wall) = t0();
    let id = pending_id(ap.ask(A, "x.example", 443, CAPS, now, wall));
    let once = Answer::Approve {
        scope: Scope::Once,
        until: None,
    };
    ap.answer(&id, once, 0, None, 1).unwrap();
    assert_eq!(
        ap.ask(A, "x.example", 443, CAPS, now, wall),
        Asked::Granted {
            id: id.clone(),
            scope: Scope::Once
        }
    );
    assert_eq!(ap.get(&id).unwrap().state, State::Spent { by: 0 });
    let again = pending_id(ap.ask(A, "x.example", 443, CAPS, now, wall));
    assert_ne!(again, id);
}

#[test]
fn approve_session_admits_that_session_only_until_its_time_ends() {
    let ap = Approvals::default();
    let (now, wall) = t0();
    let id = pending_id(ap.ask(A, "x.example", 443, CAPS, now, wall));
    let until = Some(wall + Duration::from_secs(60));
    ap.answer(
        &id,
        Answer::Approve {
            scope: Scope::Session,
            until,
        },
        1000,
        None,
        1,
    )
    .unwrap();
    for _ in 0..3 {
        assert!(matches!(
            ap.ask(A, "x.example", 443, CAPS, now, wall),
            Asked::Granted { .. }
        ));
    }
    assert!(ap.approved_name(A, "x.example", wall));
    assert!(!ap.approved_name(B, "x.example", wall));
    // Another session is still asked.
    assert!(matches!(
        ap.ask(B, "x.example", 443, CAPS, now, wall),
        Asked::Pending { .. }
    ));
    // Past its time: asked again.
    let later = wall + Duration::from_secs(61);
    assert!(!ap.approved_name(A, "x.example", later));
    assert!(matches!(
        ap.ask(A, "x.example", 443, CAPS, now, later),
        Asked::Pending { .. }
    ));
}

#[test]
fn a_denial_carries_the_operators_reason_and_cannot_be_answered_twice() {
    let ap = Approvals::default();
    let (now, wall) = t0();
    let id = pending_id(ap.ask(A, "x.example", 443, CAPS, now, wall));
    let deny = Answer::Deny {
        reason: "use the mirror".into(),
        until: None,
        always: false,
    };
    ap.answer(&id, deny.clone(), 1000, None, 1).unwrap();
    assert_eq!(
        ap.ask(A, "x.example", 443, CAPS, now, wall),
        Asked::Denied {
            id: id.clone(),
            reason: "use the mirror".into()
        }
    );
    assert_eq!(
        ap.answer(&id, deny, 1000, None, 1),
        Err(AnswerError::Answered {
            id: id.clone(),
            state: "denied"
        })
    );
    assert_eq!(
        ap.answer(
            "00000000",
            Answer::Approve {
                scope: Scope::Once,
                until: None
            },
            0,
            None,
            1
        ),
        Err(AnswerError::NotFound("00000000".into()))
    );
}

#[test]
fn a_stale_token_is_refused_and_a_fresh_one_taken() {
    let ap = Approvals::default();
    let (now, wall) = t0();
    let id = pending_id(ap.ask(A, "x.example", 443, CAPS, now, wall));
    let shown = token(&ap.get(&id).unwrap(), 3);
    let once = Answer::Approve {
        scope: Scope::Once,
        until: None,
    };
    // The policy moved on to revision 4 since the operator looked.
    assert_eq!(
        ap.answer(&id, once.clone(), 0, Some(&shown), 4),
        Err(AnswerError::StaleToken(id.clone()))
    );
    assert_eq!(ap.get(&id).unwrap().state, State::Pending);
    ap.answer(&id, once, 0, Some(&shown), 3).unwrap();
}

#[test]
fn a_flood_of_asks_hits_the_cap_then_the_pace() {
    let ap = Approvals::default();
    let (now, wall) = t0();
    for i in 0..MAX_PENDING {
        pending_id(ap.ask(A, &format!("h{i}.example"), 443, CAPS, now, wall));
    }
    assert_eq!(
        ap.ask(A, "one-more.example", 443, CAPS, now, wall),
        Asked::Full
    );
    // Another session has its own cap.
    pending_id(ap.ask(B, "one-more.example", 443, CAPS, now, wall));
    // Answering frees room, but the minute's pace still binds.
    let ids: Vec<String> = ap
        .list()
        .into_iter()
        .filter(|i| i.who == A)
        .map(|i| i.id)
        .collect();
    for id in &ids {
        ap.answer(
            id,
            Answer::Deny {
                reason: "no".into(),
                until: None,
                always: false,
            },
            0,
            None,
            1,
        )
        .unwrap();
    }
    let room = MAX_FILED_PER_MINUTE as usize - MAX_PENDING;
    for i in 0..room {
        pending_id(ap.ask(A, &format!("later{i}.example"), 443, CAPS, now, wall));
    }
    assert_eq!(
        ap.ask(A, "too-fast.example", 443, CAPS, now, wall),
        Asked::TooFast
    );
    let next_minute = now + Duration::from_secs(60);
    // The cap binds again first (the room was used).
    let got = ap.ask(A, "too-fast.example", 443, CAPS, next_minute, wall);
    assert!(
        matches!(got, Asked::Full | Asked::Pending { .. }),
        "{got:?}"
    );
}

#[test]
fn a_reload_that_lists_a_pending_host_drops_its_item() {
    let ap = Approvals::default();
    let (now, wall) = t0();
    let id = pending_id(ap.ask(A, "x.example", 443, CAPS, now, wall));
    let kept = pending_id(ap.ask(A, "y.example", 443, CAPS, now, wall));
    assert_eq!(ap.drop_covered(|h, _, _| h == "x.example"), 1);
    assert!(ap.get(&id).is_none());
    assert!(ap.get(&kept).is_some());
}

#[test]
fn the_inbox_lists_pending_items_first() {
    let ap = Approvals::default();
    let (now, wall) = t0();
    let first = pending_id(ap.ask(A, "a.example", 443, CAPS, now, wall));
    let second = pending_id(ap.ask(
        A,
        "b.example",
        443,
        CAPS,
        now,
        wall + Duration::from_secs(1),
    ));
    ap.answer(
        &first,
        Answer::Deny {
            reason: "no".into(),
            until: None,
            always: false,
        },
        0,
        None,
        1,
    )
    .unwrap();
    let ids: Vec<String> = ap.list().into_iter().map(|i| i.id).collect();
    assert_eq!(ids, [second, first]);
}

#[test]
fn holds_are_counted_per_session_and_released_when_dropped() {
    let ap = Approvals::default();
    let first = ap.hold(A, 2).unwrap();
    let second = ap.hold(A, 2).unwrap();
    assert!(ap.hold(A, 2).is_none(), "past the cap");
    let other = ap.hold(B, 2).unwrap();
    assert_eq!((ap.holding(A), ap.holding(B)), (2, 1));
    drop(first);
    assert_eq!(ap.holding(A), 1);
    let again = ap.hold(A, 2).unwrap();
    drop((second, again, other));
    assert_eq!((ap.holding(A), ap.holding(B)), (0, 0));
}

/// Session `k` of the agent (uid 1000), as a connection from `127.77.0.k` is keyed.
const fn session(k: u16) -> Client {
    Client::Session {
        uid: Some(1000),
        session: k,
    }
}

fn approve(scope: Scope) -> Answer {
    Answer::Approve { scope, until: None }
}

/// Session numbers are reused: a session that begins with the number of one that ended is
/// asked afresh. Every item of the ended one is dropped (pending, approved once or for the
/// session, spent, denied for the session) but its `always` answers, grants for every
/// session; another session's items, and another uid's, stay as they were.
#[test]
fn attack_a_session_that_begins_with_a_reused_number_inherits_nothing_of_the_ended_one() {
    let ap = Approvals::default();
    let (now, wall) = t0();
    let two = session(2);
    let ask = |who: Client, host: &str| ap.ask(who, host, 443, CAPS, now, wall);
    let answer = |id: &str, a: Answer| ap.answer(id, a, 0, None, 1).unwrap();
    let pending = pending_id(ask(two, "pending.example"));
    let for_session = pending_id(ask(two, "session.example"));
    answer(&for_session, approve(Scope::Session));
    let once = pending_id(ask(two, "once.example"));
    answer(&once, approve(Scope::Once));
    let spent = pending_id(ask(two, "spent.example"));
    answer(&spent, approve(Scope::Once));
    assert!(matches!(ask(two, "spent.example"), Asked::Granted { .. }));
    let denied = pending_id(ask(two, "denied.example"));
    let deny = |always: bool| Answer::Deny {
        reason: "no".into(),
        until: None,
        always,
    };
    answer(&denied, deny(false));
    let granted = pending_id(ask(two, "granted.example"));
    answer(&granted, approve(Scope::Always));
    let refused = pending_id(ask(two, "refused.example"));
    answer(&refused, deny(true));
    // Session 3 of the same uid, and another uid, approved for their session.
    let three = pending_id(ask(session(3), "session.example"));
    answer(&three, approve(Scope::Session));
    let other = pending_id(ask(A, "session.example"));
    answer(&other, approve(Scope::Session));
    // Session 2 files to its pace (7 items filed so far, 3 more): its pace goes with it.
    let tight = Caps {
        pending: 16,
        per_minute: 10,
    };
    for i in 0..3 {
        pending_id(ap.ask(two, &format!("h{i}.example"), 443, tight, now, wall));
    }
    assert_eq!(
        ap.ask(two, "late.example", 443, tight, now, wall),
        Asked::TooFast
    );

    let later = wall + Duration::from_secs(60);
    let f = ap.begin(2, later);
    assert_eq!(
        f,
        Forgotten {
            pending: 4,
            approvals: 3,
            denials: 1
        }
    );
    for id in [&pending, &for_session, &once, &spent, &denied] {
        assert_eq!(ap.get(id), None, "{id}");
    }
    // The new session 2 files at its own pace, and is asked again for each host the ended
    // one was answered for.
    pending_id(ap.ask(two, "late.example", 443, tight, now, wall));
    for host in [
        "session.example",
        "once.example",
        "denied.example",
        "pending.example",
    ] {
        let id = pending_id(ask(two, host));
        assert!(![&pending, &for_session, &once, &denied].contains(&&id));
    }
    // Its grants stay: they are for every session.
    assert!(matches!(ask(two, "granted.example"), Asked::Granted { .. }));
    assert!(matches!(ask(two, "refused.example"), Asked::Denied { .. }));
    // Nobody else's answers moved.
    assert!(matches!(ask(session(3), "session.example"), Asked::Granted { id, .. } if id == three));
    assert!(matches!(ask(A, "session.example"), Asked::Granted { id, .. } if id == other));
    assert!(ap.approved_name(session(3), "session.example", wall));
    assert!(!ap.approved_name(two, "session.example", wall));
    // Listed as begun, the latest start of the number replacing the one before.
    assert_eq!(ap.begun(), vec![(2, later)]);
    ap.begin(5, wall);
    let again = later + Duration::from_secs(1);
    assert_eq!(ap.begin(2, again).pending, 5);
    assert_eq!(ap.begun(), vec![(2, again), (5, wall)]);
}
