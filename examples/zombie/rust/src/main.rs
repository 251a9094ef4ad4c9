//! The scenario from Martin Kleppmann's "How to do distributed locking", made runnable.
//!
//! ```text
//! lease-zombie zombie LEASE_URL DATA_KEY   hold the lease, write, check the lease, then stop
//!                                          (SIGSTOP to itself: a GC pause between the check and
//!                                          the write); when continued, write again
//! lease-zombie newer LEASE_URL DATA_KEY    wait for the lease, write as the newer holder
//! lease-zombie show LEASE_URL DATA_KEY     print the object and the epoch that wrote it
//! ```
//! `run.sh` plays the scenario. The zombie exits 0 when the store rejected its late write
//! (`Fenced`), 1 if the write went through (which would be the bug fencing prevents).

use std::time::Duration;

use lease::{Client, ErrorKind, LeaseOptions};

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("lease-zombie: {msg}");
    std::process::exit(2)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, url, data_key] = &args[..] else {
        fail("usage: lease-zombie zombie|newer|show LEASE_URL DATA_KEY")
    };
    let (client, key) = Client::for_url(url).unwrap_or_else(|e| fail(e));
    let opts = LeaseOptions::new(Duration::from_secs(2)).wait(Duration::from_secs(120));
    match mode.as_str() {
        "zombie" => {
            let held = client
                .acquire(&key, &opts)
                .await
                .unwrap_or_else(|e| fail(e));
            held.fenced_put(
                data_key,
                format!("written by the first holder, epoch {}", held.epoch()),
            )
            .await
            .unwrap_or_else(|e| fail(e));
            // The check passes...
            held.ensure_held(Duration::from_millis(500))
                .unwrap_or_else(|e| fail(e));
            println!(
                "zombie: epoch {} checked its lease; pausing before the write",
                held.epoch()
            );
            // ...and the process stops right here, as in a long GC pause.
            // SAFETY: raise(2) stops this process until SIGCONT.
            unsafe { libc::raise(libc::SIGSTOP) };
            println!(
                "zombie: resumed; lease says {:?} left; writing anyway",
                held.remaining()
            );
            match held
                .fenced_put(
                    data_key,
                    format!("ZOMBIE WRITE from epoch {}", held.epoch()),
                )
                .await
            {
                Err(e) if e.kind() == ErrorKind::Fenced => {
                    println!("zombie: the store rejected the write: {e}");
                }
                Err(e) => fail(e),
                Ok(_) => {
                    println!("zombie: the write went through: this is the bug fencing prevents");
                    std::process::exit(1);
                }
            }
        }
        "newer" => {
            let held = client
                .acquire(&key, &opts)
                .await
                .unwrap_or_else(|e| fail(e));
            held.fenced_put(
                data_key,
                format!("written by the newer holder, epoch {}", held.epoch()),
            )
            .await
            .unwrap_or_else(|e| fail(e));
            println!("newer: took over at epoch {} and wrote", held.epoch());
            held.release().await.unwrap_or_else(|e| fail(e));
        }
        // Where the holders' fenced writes put `data_key`: beside the lease (a client with no
        // lease reads from the store's root, so it is given the placed key).
        "show" => match client
            .fenced_get(&format!(
                "/{}",
                lease::object_key(&key, data_key).unwrap_or_else(|e| fail(e))
            ))
            .await
            .unwrap_or_else(|e| fail(e))
        {
            Some(obj) => println!(
                "{}: {:?} (epoch {})",
                data_key,
                String::from_utf8_lossy(&obj.bytes),
                obj.epoch.map_or("none".into(), |e| e.to_string())
            ),
            None => println!("{data_key}: absent"),
        },
        _ => fail("usage: lease-zombie zombie|newer|show LEASE_URL DATA_KEY"),
    }
}
