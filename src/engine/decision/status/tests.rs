use super::*;

fn by_type<'a>(cs: &'a [Value], t: &str) -> &'a Value {
    cs.iter().find(|c| c["type"] == t).unwrap()
}

#[test]
fn ready_when_applied_and_all_children_ready() {
    let cs = conditions(
        &Outcome::Applied {
            not_ready: vec![],
            waiting: vec![],
            unserved: Vec::new(),
        },
        &[],
        "T1",
        Some(3),
    );
    assert_eq!(by_type(&cs, "Ready")["status"], "True");
    assert_eq!(by_type(&cs, "Reconciled")["reason"], "Applied");
    assert_eq!(by_type(&cs, "Waiting")["status"], "False");
    assert_eq!(by_type(&cs, "Ready")["observedGeneration"], 3);
}

#[test]
fn a_child_waiting_for_another_sets_waiting_and_keeps_reconciled() {
    let cs = conditions(
        &Outcome::Applied {
            not_ready: vec!["deployment/shop".into()],
            waiting: vec!["`ingress` waits for `deployment` to be ready".into()],
            unserved: Vec::new(),
        },
        &[],
        "T1",
        None,
    );
    assert_eq!(by_type(&cs, "Waiting")["status"], "True");
    assert_eq!(by_type(&cs, "Waiting")["reason"], "WaitingForChildren");
    assert_eq!(
        by_type(&cs, "Waiting")["message"],
        "waiting: `ingress` waits for `deployment` to be ready"
    );
    assert_eq!(by_type(&cs, "Ready")["status"], "False");
    assert_eq!(
        by_type(&cs, "Ready")["message"],
        "not ready: deployment/shop, `ingress` waits for `deployment` to be ready"
    );
    assert_eq!(by_type(&cs, "Reconciled")["status"], "True");
}

#[test]
fn transition_time_moves_only_on_a_status_change() {
    let first = conditions(
        &Outcome::Applied {
            not_ready: vec!["deployment/shop".into()],
            waiting: vec![],
            unserved: Vec::new(),
        },
        &[],
        "T1",
        None,
    );
    assert_eq!(by_type(&first, "Ready")["status"], "False");
    let same = conditions(
        &Outcome::Applied {
            not_ready: vec!["service/shop".into()],
            waiting: vec![],
            unserved: Vec::new(),
        },
        &first,
        "T2",
        None,
    );
    assert_eq!(
        by_type(&same, "Ready")["lastTransitionTime"],
        "T1",
        "still False: time kept"
    );
    assert_eq!(
        by_type(&same, "Ready")["message"],
        "not ready: service/shop"
    );
    let flipped = conditions(
        &Outcome::Applied {
            not_ready: vec![],
            waiting: vec![],
            unserved: Vec::new(),
        },
        &same,
        "T3",
        None,
    );
    assert_eq!(by_type(&flipped, "Ready")["lastTransitionTime"], "T3");
    assert_eq!(
        by_type(&flipped, "Reconciled")["lastTransitionTime"],
        "T1",
        "Reconciled stayed True"
    );
}

fn part(outcome: Outcome, fields: Option<Value>, generation: i64) -> Part {
    Part {
        outcome,
        fields: fields.map(|f| f.as_object().unwrap().clone()),
        conditions: Vec::new(),
        generation: Some(generation),
    }
}

fn ready() -> Outcome {
    Outcome::Applied {
        not_ready: vec![],
        waiting: vec![],
        unserved: Vec::new(),
    }
}

#[test]
fn rule_fields_are_kept_while_nothing_new_was_rendered() {
    let previous =
        json!({"url": "http://a", "readyReplicas": 2, "observedGeneration": 1, "conditions": []});
    let waiting = part(
        Outcome::Waiting {
            missing: vec!["x".into()],
        },
        None,
        2,
    );
    let names = ["url", "readyReplicas", "absent"];
    let one = |p: &Part| {
        compose(
            &[Contributor {
                rule: "r",
                fields: &names,
                conditions: &[],
                part: Some(p),
            }],
            &previous,
            "T",
            Some(2),
        )
    };
    let s = one(&waiting);
    assert_eq!(s["url"], "http://a");
    assert_eq!(s["readyReplicas"], 2);
    assert!(s.get("absent").is_none());
    assert_eq!(
        s["observedGeneration"], 1,
        "nothing was computed from generation 2: observedGeneration stays"
    );
    let s = one(&part(ready(), Some(json!({"url": "http://b"})), 2));
    assert_eq!(s["url"], "http://b");
    assert_eq!(s["observedGeneration"], 2);
    assert!(
        s.get("readyReplicas").is_none(),
        "an applied reconcile writes exactly what it rendered"
    );
}

#[test]
fn two_rules_on_one_object_keep_their_fields_and_conditions_apart() {
    let previous = json!({"conditions": []});
    let a = part(ready(), Some(json!({"a": 1})), 4);
    let b = part(
        Outcome::Failed {
            reason: reasons::INVALID,
            message: "child refused".into(),
        },
        None,
        4,
    );
    let s = compose(
        &[
            Contributor {
                rule: "alpha",
                fields: &["a"],
                conditions: &[],
                part: Some(&a),
            },
            Contributor {
                rule: "beta",
                fields: &["b"],
                conditions: &[],
                part: Some(&b),
            },
        ],
        &previous,
        "T",
        Some(4),
    );
    let cs = s["conditions"].as_array().unwrap();
    assert_eq!(s["a"], 1);
    assert_eq!(
        by_type(cs, "Ready")["status"],
        "False",
        "one rule failing is failing"
    );
    assert_eq!(by_type(cs, "Ready")["reason"], "Invalid");
    assert_eq!(by_type(cs, "Ready")["message"], "beta: child refused");
    assert_eq!(by_type(cs, "Reconciled")["status"], "False");
    assert_eq!(by_type(cs, "alpha.kiln.dev/Ready")["status"], "True");
    assert_eq!(by_type(cs, "beta.kiln.dev/Reconciled")["reason"], "Invalid");
    assert!(
        s.get("observedGeneration").is_none(),
        "beta computed nothing from generation 4"
    );
}

#[test]
fn a_rule_not_reconciled_yet_keeps_what_the_object_shows() {
    let previous = json!({
        "b": "kept",
        "conditions": [{"type": "beta.kiln.dev/Ready", "status": "True", "reason": "AllChildrenReady", "message": "m", "lastTransitionTime": "T0"}],
    });
    let a = part(ready(), Some(json!({"a": 1})), 1);
    let s = compose(
        &[
            Contributor {
                rule: "alpha",
                fields: &["a"],
                conditions: &[],
                part: Some(&a),
            },
            Contributor {
                rule: "beta",
                fields: &["b"],
                conditions: &[],
                part: None,
            },
        ],
        &previous,
        "T1",
        Some(1),
    );
    let cs = s["conditions"].as_array().unwrap();
    assert_eq!(s["b"], "kept");
    assert_eq!(
        by_type(cs, "beta.kiln.dev/Ready")["lastTransitionTime"],
        "T0"
    );
    assert_eq!(by_type(cs, "Ready")["status"], "True");
}

#[test]
fn conditions_other_controllers_add_cost_no_write_but_one_kiln_dropped_does() {
    let ready = json!({"type": "Ready", "status": "True"});
    let theirs = json!({"type": "Scaled", "status": "True"});
    let desired = json!({"conditions": [ready]});
    let live = json!({"conditions": [theirs, ready]});
    assert!(converged(&live, &desired, &["conditions/Ready".into()]));
    // kiln wrote `Old` before and composes it no more: it must leave.
    let with_old = json!({"conditions": [ready, {"type": "Old", "status": "True"}]});
    assert!(!converged(
        &with_old,
        &desired,
        &["conditions/Ready".into(), "conditions/Old".into()]
    ));
}

#[test]
fn a_field_kiln_wrote_and_no_longer_composes_is_not_converged() {
    let live = json!({"url": "u", "old": "x", "conditions": []});
    let desired = json!({"url": "u", "conditions": []});
    assert!(converged(
        &live,
        &desired,
        &["url".into(), "conditions".into()]
    ));
    assert!(!converged(
        &live,
        &desired,
        &["url".into(), "old".into(), "conditions".into()]
    ));
    // Someone else's field is not kiln's to remove.
    assert!(converged(&live, &desired, &[]));
    assert!(!converged(&json!({"url": "v"}), &desired, &[]));
}

#[test]
fn rule_conditions_join_the_engines_and_keep_their_transition_time() {
    let available = |status: &'static str, reason: &str| RuleCondition {
        type_: "Available".into(),
        status,
        reason: reason.into(),
        message: format!("{reason} now"),
    };
    let one = |p: &Part, previous: &Value, now: &str| {
        compose(
            &[Contributor {
                rule: "r",
                fields: &[],
                conditions: &["Available"],
                part: Some(p),
            }],
            previous,
            now,
            Some(1),
        )
    };
    let mut up = part(ready(), Some(json!({})), 1);
    up.conditions = vec![available("True", "Up")];
    let first = one(&up, &json!({}), "T1");
    let cs = first["conditions"].as_array().unwrap();
    assert_eq!(by_type(cs, "Ready")["status"], "True", "the engine's stay");
    let a = by_type(cs, "Available");
    assert_eq!(
        (&a["status"], &a["reason"], &a["message"]),
        (&json!("True"), &json!("Up"), &json!("Up now"))
    );
    assert_eq!(a["lastTransitionTime"], "T1");

    up.conditions = vec![available("True", "StillUp")];
    let same = one(&up, &first, "T2");
    let a = by_type(same["conditions"].as_array().unwrap(), "Available");
    assert_eq!(
        (&a["reason"], &a["lastTransitionTime"]),
        (&json!("StillUp"), &json!("T1")),
        "same status: time kept"
    );

    up.conditions = vec![available("False", "Down")];
    let flipped = one(&up, &same, "T3");
    let a = by_type(flipped["conditions"].as_array().unwrap(), "Available");
    assert_eq!(a["lastTransitionTime"], "T3");

    let waiting = part(
        Outcome::Waiting {
            missing: vec!["x".into()],
        },
        None,
        2,
    );
    let kept = one(&waiting, &flipped, "T4");
    let a = by_type(kept["conditions"].as_array().unwrap(), "Available");
    assert_eq!(
        a,
        by_type(flipped["conditions"].as_array().unwrap(), "Available"),
        "nothing rendered: the condition stays as the object shows it"
    );
}

#[test]
fn waiting_and_failure() {
    let w = conditions(
        &Outcome::Waiting {
            missing: vec!["Secret ns/s (related.credentials)".into()],
        },
        &[],
        "T",
        None,
    );
    assert_eq!(by_type(&w, "Waiting")["status"], "True");
    assert_eq!(
        by_type(&w, "Waiting")["message"],
        "waiting for Secret ns/s (related.credentials)"
    );
    let f = conditions(
        &Outcome::Failed {
            reason: reasons::TEMPLATE_ERROR,
            message: "boom".into(),
        },
        &[],
        "T",
        None,
    );
    assert_eq!(by_type(&f, "Reconciled")["status"], "False");
    assert_eq!(by_type(&f, "Reconciled")["reason"], "TemplateError");
}
