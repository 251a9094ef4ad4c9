//! The process's one registry of stores: every entry point naming a store gets the same
//! client, and a forked child gets its own (its own binary: forking a process whose other
//! threads may hold the registry's lock is only safe with no other test running).

use std::sync::Arc;

use lease::{Client, StoreUrl};

#[test]
fn one_client_per_store_and_a_forked_child_gets_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let base = format!("file://{}", dir.path().display());
    let (a, key_a) = Client::for_url(&format!("{base}/a")).unwrap();
    let (b, key_b) = Client::for_url(&format!("{base}/b")).unwrap();
    assert_eq!((key_a.as_str(), key_b.as_str()), ("a", "b"));
    let store = StoreUrl::parse(&base).unwrap();
    assert!(Arc::ptr_eq(a.store(), b.store()), "two leases of one store");
    // A client counts its requests through a wrapper (metrics): StoreUrl::open gives the one
    // store beneath, the same every time.
    assert!(
        Arc::ptr_eq(&store.open().unwrap(), &store.open().unwrap()),
        "StoreUrl::open"
    );
    assert!(Arc::ptr_eq(
        a.store(),
        Client::for_store(&store).unwrap().store()
    ));
    let parents = Arc::as_ptr(a.store()) as *const () as usize;

    // SAFETY: this test is the only one in its binary; the child only asks the registry and
    // exits with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let (child, _) = Client::for_url(&format!("{base}/a")).unwrap();
        let again = Client::for_store(&store).unwrap();
        let fresh = Arc::as_ptr(child.store()) as *const () as usize != parents;
        let shared = Arc::ptr_eq(child.store(), again.store());
        // SAFETY: ends the child without running the parent's destructors or test harness.
        unsafe { libc::_exit(if fresh && shared { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the forked child reused its parent's client, or did not share its own (status {status})"
    );
}
