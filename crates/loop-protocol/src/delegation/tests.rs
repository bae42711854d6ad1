use super::*;
use serde_json::json;

fn parent_contract() -> Contract {
    let src = r#"
instruction: Split the work across the packages.
criteria:
  - id: all-pass
    text: every package's tests pass
    checks:
      - run: make test
protected: ["vendor/**"]
allow_check_changes: ["pkg/a/tests/**"]
network_allow: ["*.example.org", "pypi"]
limits: { max_steps: 40, max_tokens: 100000, budget_usd: 2.0, timeout_secs: 3600, max_children: 3, max_depth: 2 }
"#;
    Contract::from_yaml(src, "parent.yaml").expect("parent contract")
}

fn left() -> Left {
    Left {
        steps: 30,
        tokens: 80_000,
        usd: Some(1.5),
        secs: 3000,
        children: 2,
    }
}

fn proposal() -> Proposal {
    serde_json::from_value(json!({
        "instruction": "Make package a's tests pass.",
        "criteria": [{
            "id": "a-passes",
            "text": "package a's tests pass",
            "checks": [{"run": "make -C pkg/a test"}]
        }],
        "paths": ["pkg/a/**", "docs/a.md", "./pkg/a/"],
        "network_allow": ["api.example.org"],
        "protected": ["pkg/a/generated/**"],
        "exec": [{"prefix": "git push", "decision": "forbidden"}],
        "budget": {"max_steps": 10, "max_tokens": 20000, "budget_usd": 0.5, "timeout_secs": 600},
    }))
    .expect("proposal")
}

fn refused(p: &Proposal, parent: &Authority, left: &Left) -> Vec<Refusal> {
    grant(parent, left, p).expect_err("the proposal should be refused")
}

#[test]
fn an_honest_child_is_granted_no_more_than_it_asked_and_within_its_parent() {
    let pc = parent_contract();
    let parent = Authority::of_contract(&pc);
    let p = proposal();
    let child = grant(&parent, &left(), &p).expect("granted");
    assert_eq!(child.writable, vec!["docs/a.md", "pkg/a"]);
    assert!(child.may_write("pkg/a/src/lib.rs") && child.may_write("docs/a.md"));
    assert!(!child.may_write("pkg/ab/x") && !child.may_write("docs") && !child.may_write("pkg"));
    assert_eq!(child.network_allow, vec!["api.example.org"]);
    for g in &parent.protected {
        assert!(child.protected.contains(g), "{g} inherited");
    }
    assert!(child.protected.contains(&"pkg/a/generated/**".to_string()));
    assert_eq!(child.exec.len(), 1);
    assert_eq!((child.max_children, child.max_depth), (0, 0));
    assert!(
        within(&child, &parent).is_empty(),
        "{:?}",
        within(&child, &parent)
    );

    let c = child_contract(&pc, &child, &p).expect("the child's contract reads");
    assert!(
        contract_within(&c, &child).is_empty(),
        "{:?}",
        contract_within(&c, &child)
    );
    // A contract claiming more than was granted is caught.
    let mut wider = c.clone();
    wider.limits.max_steps += 1;
    wider.unprotect.push("vendor/**".into());
    wider.protected.retain(|g| g != "vendor/**");
    wider.network_allow.push("evil.test".into());
    wider.allow_check_changes.push("tests/**".into());
    let rules: Vec<_> = contract_within(&wider, &child)
        .iter()
        .map(|r| r.rule())
        .collect();
    assert_eq!(
        rules,
        vec![
            "delegation: budget out of what the parent has left",
            "delegation: network_allow within the parent's",
            "delegation: the parent's rules are inherited",
            "delegation: the parent's rules are inherited",
        ]
    );
    assert_eq!(c.instruction, "Make package a's tests pass.");
    assert_eq!(c.criteria.len(), 1);
    assert_eq!(
        c.criteria[0].checks[0].describe(),
        "run `make -C pkg/a test`"
    );
    assert_eq!(
        (
            c.limits.max_steps,
            c.limits.max_tokens,
            c.limits.timeout_secs
        ),
        (10, 20000, 600)
    );
    assert_eq!(c.limits.budget_usd, Some(0.5));
    assert_eq!((c.limits.max_children, c.limits.max_depth), (0, 0));
    assert_eq!(c.limits.max_diff_lines, pc.limits.max_diff_lines);
    let mut globs = c.protected_globs();
    let mut want = child.protected.clone();
    globs.sort();
    want.sort();
    assert_eq!(
        globs, want,
        "the child's contract protects what was granted"
    );
    assert_eq!(c.allow_check_changes, pc.allow_check_changes);
    assert_eq!(c.network_allow, child.network_allow);
}

#[test]
fn a_task_cannot_delegate_unless_its_contract_allows_it() {
    let c = Contract::from_yaml(
        "instruction: x\ncriteria:\n  - id: a\n    text: a\n    checks:\n      - run: make test\n",
        "c.yaml",
    )
    .unwrap();
    assert_eq!((c.limits.max_children, c.limits.max_depth), (0, 0));
    let no = refused(&proposal(), &Authority::of_contract(&c), &left());
    assert_eq!(no, vec![Refusal::Off]);
    assert_eq!(no[0].rule(), "delegation: off");
    assert!(no[0].to_string().contains("limits.max_children is 0"));
    // Children allowed, but no level below: still refused.
    let mut a = Authority::of_contract(&parent_contract());
    a.max_depth = 0;
    assert_eq!(refused(&proposal(), &a, &left()), vec![Refusal::Depth]);
}

#[test]
fn paths_outside_the_parents_or_not_plain_paths_are_refused_by_name() {
    let mut parent = Authority::of_contract(&parent_contract());
    parent.writable = vec!["pkg".into()];
    let mut p = proposal();
    p.paths = vec![
        "pkg2/x".into(),
        "../pkg/a".into(),
        "/etc/passwd".into(),
        "pkg/*.py".into(),
        ".".into(),
        "pkg/a".into(),
    ];
    let no = refused(&p, &parent, &left());
    let outside: Vec<_> = no
        .iter()
        .filter_map(|r| match r {
            Refusal::Outside { path, .. } => Some(path.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(outside, vec!["pkg2/x"], "{no:?}");
    let not_paths: Vec<_> = no
        .iter()
        .filter_map(|r| match r {
            Refusal::NotAPath { path, .. } => Some(path.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(not_paths, vec!["../pkg/a", "/etc/passwd", "pkg/*.py"]);
    assert!(no.iter().any(
        |r| r.to_string() == "path `pkg2/x` is not beneath a path this task may change (`pkg`)"
    ));
    // The honest version: beneath the parent's path.
    p.paths = vec!["pkg/a".into(), "pkg/b/**".into()];
    assert_eq!(
        grant(&parent, &left(), &p).unwrap().writable,
        vec!["pkg/a", "pkg/b"]
    );
    // `.`: everything the parent may change, for a grandchild too.
    p.paths = vec![".".into()];
    assert_eq!(grant(&parent, &left(), &p).unwrap().writable, vec!["pkg"]);
    // None at all, or too many.
    p.paths.clear();
    assert!(refused(&p, &parent, &left()).contains(&Refusal::Paths { count: 0 }));
}

#[test]
fn hosts_beyond_the_parents_allow_list_are_refused() {
    let parent = Authority::of_contract(&parent_contract());
    let mut p = proposal();
    for (host, ok) in [
        ("api.example.org", true),
        ("*.api.example.org", true),
        ("pypi", true),
        ("example.org", false),
        ("evil-example.org", false),
        ("api.example.org:8443", false),
        ("*.org", false),
        ("npm", false),
    ] {
        p.network_allow = vec![host.into()];
        let r = grant(&parent, &left(), &p);
        assert_eq!(r.is_ok(), ok, "{host}: {r:?}");
        if !ok {
            assert_eq!(
                r.unwrap_err()[0].rule(),
                "delegation: network_allow within the parent's"
            );
        }
    }
}

#[test]
fn a_budget_beyond_what_the_parent_has_left_is_refused_and_the_rest_granted() {
    let parent = Authority::of_contract(&parent_contract());
    let mut p = proposal();
    p.budget = Budget {
        max_steps: 31,
        max_tokens: 80_001,
        budget_usd: Some(1.51),
        timeout_secs: 3001,
    };
    let whats: Vec<_> = refused(&p, &parent, &left())
        .iter()
        .map(|r| match r {
            Refusal::Budget { what, .. } => *what,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        whats,
        vec!["max_steps", "max_tokens", "timeout_secs", "budget_usd"]
    );
    // An unbounded spend under a bounded parent.
    p.budget = Budget {
        budget_usd: None,
        ..proposal().budget
    };
    assert!(
        refused(&p, &parent, &left())[0]
            .to_string()
            .contains("unbounded")
    );
    // Exactly what is left is granted.
    p.budget = Budget {
        max_steps: 30,
        max_tokens: 80_000,
        budget_usd: Some(1.5),
        timeout_secs: 3000,
    };
    assert!(grant(&parent, &left(), &p).is_ok());
    // A parent at its limit cannot delegate at all.
    let spent = Left { steps: 0, ..left() };
    assert_eq!(
        refused(&p, &parent, &spent)[0].rule(),
        "delegation: budget out of what the parent has left"
    );
    let no_children = Left {
        children: 0,
        ..left()
    };
    assert_eq!(
        refused(&p, &parent, &no_children),
        vec![Refusal::Children { max: 3 }]
    );
}

#[test]
fn a_child_may_delegate_only_less_deep_than_its_parent() {
    let parent = Authority::of_contract(&parent_contract()); // depth 2, 3 children
    let mut p = proposal();
    p.max_depth = 2;
    p.max_children = 1;
    assert!(matches!(
        refused(&p, &parent, &left())[0],
        Refusal::ChildLimits {
            what: "max_depth",
            asked: 2,
            most: 1
        }
    ));
    p.max_depth = 1;
    p.max_children = 4;
    assert!(matches!(
        refused(&p, &parent, &left())[0],
        Refusal::ChildLimits {
            what: "max_children",
            most: 3,
            ..
        }
    ));
    // Children without a level to put them on.
    p.max_depth = 0;
    p.max_children = 1;
    assert!(matches!(
        refused(&p, &parent, &left())[0],
        Refusal::ChildLimits { most: 0, .. }
    ));
    p.max_depth = 1;
    p.max_children = 3;
    let child = grant(&parent, &left(), &p).unwrap();
    assert!(within(&child, &parent).is_empty());
    // The grandchild level: the child may delegate, its children may not.
    let mut q = proposal();
    q.paths = vec!["pkg/a/sub".into()];
    q.network_allow.clear();
    q.budget.budget_usd = Some(0.1);
    let l = Left {
        steps: 5,
        tokens: 5000,
        usd: Some(0.5),
        secs: 600,
        children: 3,
    };
    q.budget = Budget {
        max_steps: 5,
        max_tokens: 5000,
        budget_usd: Some(0.1),
        timeout_secs: 60,
    };
    let grandchild = grant(&child, &l, &q).unwrap();
    assert_eq!(grandchild.max_depth, 0);
    q.max_depth = 1;
    q.max_children = 1;
    assert!(grant(&child, &l, &q).is_err());
    // And a grandchild cannot delegate at all.
    assert_eq!(refused(&q, &grandchild, &l), vec![Refusal::Off]);
}

#[test]
fn exec_rules_can_only_tighten_and_are_inherited() {
    // `allow` is not a decision a child's rule can take.
    let loose: Result<ExecRule, _> =
        serde_json::from_value(json!({"prefix": "curl", "decision": "allow"}));
    assert!(loose.is_err());
    let parent = Authority::of_contract(&parent_contract());
    let mut p = proposal();
    p.exec = vec![ExecRule {
        prefix: " ".into(),
        decision: Stricter::Prompt,
    }];
    assert_eq!(refused(&p, &parent, &left())[0].rule(), "delegation: exec");
    p.exec = vec![ExecRule {
        prefix: "pip install".into(),
        decision: Stricter::Prompt,
    }];
    let child = grant(&parent, &left(), &p).unwrap();
    let mut q = proposal();
    q.exec.clear();
    let mut deeper = child.clone();
    deeper.max_children = 1;
    deeper.max_depth = 1;
    let grandchild = grant(&deeper, &left(), &q).unwrap();
    assert_eq!(grandchild.exec, child.exec, "a rule, once added, stays");
}

#[test]
fn a_recorded_authority_widened_after_the_grant_is_caught() {
    let parent = Authority::of_contract(&parent_contract());
    let mut p = proposal();
    p.exec = vec![];
    let mut parent2 = parent.clone();
    parent2.writable = vec!["docs".into(), "pkg".into()];
    parent2.exec = vec![ExecRule {
        prefix: "git push".into(),
        decision: Stricter::Forbidden,
    }];
    let child = grant(&parent2, &left(), &p).unwrap();
    assert!(within(&child, &parent2).is_empty());
    type Tamper = Box<dyn Fn(&mut Authority)>;
    let tamper: Vec<(&str, Tamper)> = vec![
        (
            "widened path",
            Box::new(|a| a.writable = vec![String::new()]),
        ),
        (
            "sibling path",
            Box::new(|a| a.writable = vec!["pkg/ab".into(), "../x".into()]),
        ),
        (
            "dropped protection",
            Box::new(|a| a.protected.retain(|g| g != "vendor/**")),
        ),
        ("dropped exec rule", Box::new(|a| a.exec.clear())),
        (
            "new exemption",
            Box::new(|a| a.allow_check_changes.push("tests/**".into())),
        ),
        (
            "new judge",
            Box::new(|a| a.judge_may_change.push("check.sh".into())),
        ),
        (
            "new host",
            Box::new(|a| a.network_allow.push("evil.test".into())),
        ),
        ("more steps", Box::new(|a| a.budget.max_steps = 41)),
        (
            "unbounded dollars",
            Box::new(|a| a.budget.budget_usd = None),
        ),
        ("deeper", Box::new(|a| a.max_depth = 2)),
    ];
    for (name, f) in tamper {
        let mut c = child.clone();
        f(&mut c);
        assert!(!within(&c, &parent2).is_empty(), "{name} not caught");
    }
    // Paths within the parent's but recorded for a parent that may write only `pkg/b`.
    let mut narrow = parent2.clone();
    narrow.writable = vec!["pkg/b".into()];
    assert!(matches!(
        within(&child, &narrow)[0],
        Refusal::Outside { .. }
    ));
}

#[test]
fn a_childs_malformed_criteria_are_refused_as_a_contract_file_would_be() {
    let pc = parent_contract();
    let parent = Authority::of_contract(&pc);
    let mut p = proposal();
    p.criteria = json!([{"id": "a", "text": "no checks", "checks": []}]);
    let child = grant(&parent, &left(), &p).unwrap();
    let e = child_contract(&pc, &child, &p).unwrap_err().to_string();
    assert!(e.contains("the delegated child's contract"), "{e}");
    assert!(e.contains("check"), "{e}");
    p.criteria = json!("write it all");
    assert!(child_contract(&pc, &child, &p).is_err());
}

#[test]
fn delegation_limits_are_read_bounded_and_left_out_of_a_contract_that_has_none() {
    let c = parent_contract();
    assert_eq!((c.limits.max_children, c.limits.max_depth), (3, 2));
    let back = Contract::from_yaml(
        &serde_json::to_string(&c.to_authoring()).unwrap(),
        "round trip",
    )
    .unwrap();
    assert_eq!(back, c);
    let too_many = "instruction: x\ncriteria:\n  - id: a\n    text: a\n    checks:\n      - run: make test\nlimits: { max_children: 65, max_depth: 5 }\n";
    let e = Contract::from_yaml(too_many, "c.yaml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("`max_children` may be at most 64"), "{e}");
    assert!(e.contains("`max_depth` may be at most 4"), "{e}");
    // A contract without them hashes as before: neither key is written.
    let plain = serde_json::to_value(Limits::default()).unwrap();
    assert!(plain.get("max_children").is_none() && plain.get("max_depth").is_none());
}

#[test]
fn a_model_cannot_give_a_persons_exemption_to_its_childs_checks() {
    let pc = parent_contract();
    let parent = Authority::of_contract(&pc);
    for (criterion, named) in [
        (
            json!({"id": "a", "text": "a", "checks": [{"run": "true", "allow_vacuous": true}]}),
            "allow_vacuous",
        ),
        (
            json!({"id": "a", "text": "a", "guard": true, "checks": [{"run": "make test"}]}),
            "guard",
        ),
        (
            json!({"id": "a", "text": "a", "checks": [{"run": "pytest", "nonempty_tests": false}]}),
            "nonempty_tests: false",
        ),
    ] {
        let mut p = proposal();
        p.criteria = json!([criterion]);
        let child = grant(&parent, &left(), &p).unwrap();
        let e = child_contract(&pc, &child, &p).unwrap_err().to_string();
        assert!(
            e.contains(named) && e.contains("only a person may exempt"),
            "{e}"
        );
    }
    // The same checks without the exemption are read.
    let mut p = proposal();
    p.criteria =
        json!([{"id": "a", "text": "a", "checks": [{"run": "pytest", "nonempty_tests": true}]}]);
    let child = grant(&parent, &left(), &p).unwrap();
    assert!(child_contract(&pc, &child, &p).is_ok());
}

#[test]
fn a_child_drives_the_browser_only_when_its_parent_may() {
    let mut p = proposal();
    p.browser = true;
    // A parent without the browser cannot hand it on: refused by name.
    let pc = parent_contract();
    assert!(!pc.browser);
    let parent = Authority::of_contract(&pc);
    let no = refused(&p, &parent, &left());
    assert!(no.contains(&Refusal::Browser), "{no:?}");
    assert_eq!(Refusal::Browser.rule(), "delegation: browser");
    // A child's authority claiming it is outside such a parent's.
    let mut claimed = grant(&parent, &left(), &proposal()).expect("granted");
    assert!(!claimed.browser);
    claimed.browser = true;
    assert!(within(&claimed, &parent).contains(&Refusal::Browser));
    // A parent with the browser grants it to the child that asks, and
    // only to that one.
    let mut pc = parent_contract();
    pc.browser = true;
    let parent = Authority::of_contract(&pc);
    let child = grant(&parent, &left(), &p).expect("granted");
    assert!(child.browser);
    assert!(within(&child, &parent).is_empty());
    let other = grant(&parent, &left(), &proposal()).expect("granted");
    assert!(!other.browser);
}
