//! `tailbound calibrate`: a scratch file is measured both ways and removed; an existing file with
//! data is only read; the profile it stores loads back.

use std::process::Command;

use tailbound::sched::DeviceProfile;

fn calibrate(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tailbound"))
        .arg("calibrate")
        .args(args)
        .output()
        .expect("run tailbound")
}

#[test]
fn calibrates_a_scratch_file_and_stores_a_profile() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("scratch");
    let out_path = dir.path().join("profile.json");
    let out = calibrate(&[
        target.to_str().unwrap(),
        "--max-size",
        "1MiB",
        "--scratch-size",
        "8MiB",
        "--samples",
        "3",
        "--latency-goal",
        "10s",
        "--out",
        out_path.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("| write | 1 MiB |") && text.contains("| read | 4 KiB |"),
        "{text}"
    );
    assert!(!target.exists(), "scratch file removed");
    let p = DeviceProfile::load(&out_path).expect("profile loads");
    // Every measured size is within a 10 s goal, so the largest one is picked.
    assert_eq!((p.max_io_read, p.max_io_write), (1 << 20, 1 << 20));
}

#[test]
fn an_existing_file_is_not_written_without_write_scratch() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("data");
    let data: Vec<u8> = (0..(2u32 << 20)).map(|i| (i % 253) as u8).collect();
    std::fs::write(&target, &data).unwrap();
    let out_path = dir.path().join("profile.json");
    let out = calibrate(&[
        target.to_str().unwrap(),
        "--max-size",
        "256KiB",
        "--samples",
        "3",
        "--out",
        out_path.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("write: not measured"), "{text}");
    assert!(!text.contains("| write |"), "{text}");
    assert!(
        std::fs::read(&target).unwrap() == data,
        "contents untouched"
    );
    let p = DeviceProfile::load(&out_path).expect("profile loads");
    assert_eq!(p.max_io_write, DeviceProfile::conservative().max_io_write);
}
