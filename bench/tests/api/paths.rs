#[test]
fn report_dir_follows_cargo_target_dir() {
    use std::path::Path;
    let d = evd_bench::report_dir(Some("/tmp/t".into()), Path::new("/x"));
    assert_eq!(d, Path::new("/tmp/t/evd-bench"));
    let d = evd_bench::report_dir(Some("rel".into()), Path::new("/x"));
    assert_eq!(d, Path::new("/x/rel/evd-bench"));
    let d = evd_bench::report_dir(None, Path::new("/x"));
    assert!(d.ends_with("target/evd-bench"));
}
