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
