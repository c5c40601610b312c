use super::*;

fn vol(name: &str) -> Volume {
    Volume::sample(name)
}

#[test]
fn rotations_retire_what_they_replace_and_a_departure_forgets_it() {
    let mut st = ClusterState::default();
    Command::AddVolume(vol("a")).apply(&mut st).unwrap();
    let set = |certs: &[&str], retire| Command::SetCerts {
        uuid: "s1".into(),
        certs: certs.iter().map(|c| c.to_string()).collect(),
        retire,
    };
    set(&["old1", "old2"], false).apply(&mut st).unwrap();
    // A rotation: the new ones beside the old, then the old retired.
    set(&["old1", "old2", "new1", "new2"], false)
        .apply(&mut st)
        .unwrap();
    assert!(st.retired.is_empty());
    set(&["new1", "new2"], true).apply(&mut st).unwrap();
    assert_eq!(st.certs["s1"], ["new1", "new2"]);
    assert_eq!(st.retired["s1"], ["old1", "old2"]);
    assert_eq!(st.volumes["a"].version, 4, "bricks see each change");
    // Leaving the pool forgets both.
    set(&[], false).apply(&mut st).unwrap();
    assert!(st.certs.is_empty() && st.retired.is_empty());

    let cred = IssuedCredential {
        name: "laptop".into(),
        fingerprint: "fp1".into(),
        read_only: true,
        identity: Some((7, 7)),
        issued: 1,
        retired: Vec::new(),
    };
    Command::AddCredential {
        volume: "a".into(),
        credential: cred.clone(),
    }
    .apply(&mut st)
    .unwrap();
    Command::AddOperator(cred).apply(&mut st).unwrap();
    for volume in [Some("a".to_string()), None] {
        let rotate = |fp: &str| Command::RotateCredential {
            volume: volume.clone(),
            name: "laptop".into(),
            fingerprint: fp.into(),
            issued: 2,
        };
        rotate("fp2").apply(&mut st).unwrap();
        rotate("fp3").apply(&mut st).unwrap();
        let c = match &volume {
            Some(v) => &st.volumes[v].credentials[0],
            None => &st.operators[0],
        };
        // Only the last one replaced is kept; the grant is the same.
        assert_eq!(
            (c.fingerprint.as_str(), &c.retired[..]),
            ("fp3", &["fp2".to_string()][..])
        );
        assert!(c.read_only && c.identity == Some((7, 7)) && c.issued == 2);
        let missing = Command::RotateCredential {
            volume: volume.clone(),
            name: "nobody".into(),
            fingerprint: "x".into(),
            issued: 3,
        };
        assert!(missing.apply(&mut st).is_err());
    }
}

#[test]
fn credentials_are_added_once_and_revoked_by_name() {
    let mut st = ClusterState::default();
    Command::AddVolume(vol("a")).apply(&mut st).unwrap();
    let cred = |name: &str| IssuedCredential {
        name: name.into(),
        fingerprint: format!("{name}-fp"),
        read_only: false,
        identity: None,
        issued: 1,
        retired: Vec::new(),
    };
    let add = |name: &str| Command::AddCredential {
        volume: "a".into(),
        credential: cred(name),
    };
    add("laptop").apply(&mut st).unwrap();
    assert_eq!(st.volumes["a"].version, 2, "bricks see the change");
    let e = add("laptop").apply(&mut st).unwrap_err();
    assert!(
        e.message.contains("already has a credential named laptop"),
        "{e}"
    );
    add("reader").apply(&mut st).unwrap();
    let revoke = |name: &str| Command::RevokeCredential {
        volume: "a".into(),
        name: name.into(),
    };
    revoke("laptop").apply(&mut st).unwrap();
    assert_eq!(st.volumes["a"].credentials, vec![cred("reader")]);
    assert!(revoke("laptop").apply(&mut st).is_err());
    assert!(Command::AddCredential {
        volume: "nope".into(),
        credential: cred("x"),
    }
    .apply(&mut st)
    .is_err());
}

#[test]
fn commands_change_the_state_or_leave_it_alone() {
    let mut st = ClusterState::default();
    Command::AddVolume(vol("a")).apply(&mut st).unwrap();
    assert!(Command::AddVolume(vol("a")).apply(&mut st).is_err());
    let set = Command::SetOption {
        volume: "a".into(),
        key: "k".into(),
        value: "v".into(),
    };
    set.apply(&mut st).unwrap();
    assert_eq!(st.volumes["a"].version, 2);
    assert_eq!(st.volumes["a"].options["k"], "v");
    let group = Command::SetOptions {
        volume: "a".into(),
        options: vec![("k".into(), "w".into()), ("l".into(), "x".into())],
    };
    group.apply(&mut st).unwrap();
    assert_eq!(st.volumes["a"].version, 3, "one version for the group");
    assert_eq!(
        (
            &*st.volumes["a"].options["k"],
            &*st.volumes["a"].options["l"]
        ),
        ("w", "x")
    );
    Command::ResetOptions {
        volume: "a".into(),
        key: None,
    }
    .apply(&mut st)
    .unwrap();
    assert!(st.volumes["a"].options.is_empty());
    assert_eq!(st.volumes["a"].version, 4);
    Command::SetStatus {
        volume: "a".into(),
        status: VolStatus::Started,
    }
    .apply(&mut st)
    .unwrap();
    assert_eq!(st.volumes["a"].status, VolStatus::Started);
    let port = |path: &str| Command::SetBrickPort {
        volume: "a".into(),
        host: "h".into(),
        path: path.into(),
        port: 24399,
    };
    port("/b").apply(&mut st).unwrap();
    assert_eq!(st.volumes["a"].bricks[0].port, Some(24399));
    assert_eq!(st.volumes["a"].version, 5);
    assert!(port("/elsewhere").apply(&mut st).is_err());
    use crate::state::{TaskKind, TaskStatus};
    let task = |id: &str, status| Command::SetTask {
        volume: "a".into(),
        task: Task {
            id: id.into(),
            kind: TaskKind::HealFull,
            host: "h".into(),
            status,
            started: 1,
            detail: String::new(),
            progress: None,
            sets: Vec::new(),
            rows: Vec::new(),
            generation: 0,
        },
    };
    task("t1", TaskStatus::InProgress).apply(&mut st).unwrap();
    task("t1", TaskStatus::Completed).apply(&mut st).unwrap();
    task("t2", TaskStatus::InProgress).apply(&mut st).unwrap();
    let tasks = &st.volumes["a"].tasks;
    assert_eq!(tasks.len(), 1, "the last task of a kind is kept");
    assert_eq!(
        (tasks[0].id.as_str(), tasks[0].status),
        ("t2", TaskStatus::InProgress)
    );
    let before = st.volumes.clone();
    assert!(Command::RemoveVolume { volume: "b".into() }
        .apply(&mut st)
        .is_err());
    assert_eq!(st.volumes, before);
    Command::RemoveVolume { volume: "a".into() }
        .apply(&mut st)
        .unwrap();
    assert!(st.volumes.is_empty());
}

#[test]
fn a_rebalance_commits_its_layouts_when_the_last_row_completes() {
    use crate::state::{Brick, TaskKind, TaskStatus};
    let mut st = ClusterState::default();
    let mut v = vol("a");
    // Three replica-2 sets over hosts x and y: set k owned by its
    // brick k mod 2, so x owns sets 0 and 2, y set 1.
    v.replica = 2;
    v.bricks = (0..6)
        .map(|i| Brick::parse(&format!("{}:/b{i}", ["x", "y"][i % 2])).unwrap())
        .collect();
    v.layout_commit = 3;
    let rows = v.rebalance_rows();
    assert_eq!(
        rows.iter()
            .map(|r| (r.host.as_str(), r.owns.clone()))
            .collect::<Vec<_>>(),
        [("x", vec![0, 2]), ("y", vec![1])]
    );
    Command::AddVolume(v.clone()).apply(&mut st).unwrap();
    let task = Task {
        id: "t".into(),
        kind: TaskKind::Rebalance,
        host: "x".into(),
        status: TaskStatus::InProgress,
        started: 1,
        detail: String::new(),
        progress: None,
        sets: Vec::new(),
        rows: rows.clone(),
        generation: 4,
    };
    Command::SetTask {
        volume: "a".into(),
        task,
    }
    .apply(&mut st)
    .unwrap();
    let row = |host: &str, status, moved| {
        let mut r = rows.iter().find(|r| r.host == host).unwrap().clone();
        r.status = status;
        r.progress.moved = moved;
        Command::SetTaskRow {
            volume: "a".into(),
            task: "t".into(),
            row: r,
        }
    };
    row("x", TaskStatus::Completed, 5).apply(&mut st).unwrap();
    let t = &st.volumes["a"].tasks[0];
    assert_eq!(t.status, TaskStatus::InProgress, "y has not ended");
    assert_eq!(st.volumes["a"].layout_commit, 3);
    assert!(
        row("x", TaskStatus::InProgress, 6).apply(&mut st).is_err(),
        "an ended row stays ended"
    );
    row("y", TaskStatus::InProgress, 2).apply(&mut st).unwrap();
    assert_eq!(st.volumes["a"].tasks[0].progress.as_ref().unwrap().moved, 7);
    row("y", TaskStatus::Completed, 3).apply(&mut st).unwrap();
    let t = &st.volumes["a"].tasks[0];
    assert_eq!(t.status, TaskStatus::Completed);
    assert_eq!(t.progress.as_ref().unwrap().moved, 8);
    assert_eq!(
        st.volumes["a"].layout_commit, 4,
        "committed by the last row"
    );

    // Stopped: every row in progress stops; nothing is committed.
    let mut again = st.volumes["a"].tasks[0].clone();
    again.id = "t2".into();
    again.rows = rows.clone();
    again.generation = 5;
    again.settle();
    Command::SetTask {
        volume: "a".into(),
        task: again,
    }
    .apply(&mut st)
    .unwrap();
    let mut x = rows[0].clone();
    x.status = TaskStatus::Completed;
    Command::SetTaskRow {
        volume: "a".into(),
        task: "t2".into(),
        row: x,
    }
    .apply(&mut st)
    .unwrap();
    Command::StopTask {
        volume: "a".into(),
        task: "t2".into(),
    }
    .apply(&mut st)
    .unwrap();
    let t = &st.volumes["a"].tasks[0];
    assert_eq!(t.status, TaskStatus::Stopped);
    assert_eq!(t.rows[1].status, TaskStatus::Stopped);
    assert_eq!(st.volumes["a"].layout_commit, 4);
}
