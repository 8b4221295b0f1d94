use evd_bench::stats::*;

#[test]
fn median_of_odd_count_is_the_middle_sample() {
    let s = Summary::of(&[5.0, 1.0, 9.0]).unwrap();
    assert_eq!(s.median, 5.0);
    assert_eq!(s.min, 1.0);
    assert_eq!(s.max, 9.0);
}

#[test]
fn median_is_robust_to_one_outlier() {
    let s = Summary::of(&[10.0, 11.0, 12.0, 1000.0, 9.0]).unwrap();
    assert_eq!(s.median, 11.0);
    assert_eq!(s.max, 1000.0);
}

#[test]
fn single_sample_is_its_own_summary() {
    let s = Summary::of(&[4.0]).unwrap();
    assert_eq!((s.median, s.min, s.max, s.samples), (4.0, 4.0, 4.0, 1));
}

#[test]
fn no_samples_or_nan_gives_none() {
    assert_eq!(Summary::of(&[]), None);
    assert_eq!(Summary::of(&[1.0, f64::NAN]), None);
}

#[test]
fn ratio_of_evd_to_itself_is_one() {
    assert_eq!(ratio_to_evd(123.0, 123.0, true), Some(1.0));
    assert_eq!(ratio_to_evd(123.0, 123.0, false), Some(1.0));
    assert_eq!(ratio_to_evd(f64::INFINITY, 1.0, true), None);
}

#[test]
fn above_one_means_evd_is_better_in_both_directions() {
    // evd faster in throughput (more ops/s)
    assert!(ratio_to_evd(2.0, 3.0, true).unwrap() > 1.0);
    // evd faster in latency (fewer ns)
    assert!(ratio_to_evd(3.0, 2.0, false).unwrap() > 1.0);
    // evd slower in each
    assert!(ratio_to_evd(3.0, 2.0, true).unwrap() < 1.0);
    assert!(ratio_to_evd(2.0, 3.0, false).unwrap() < 1.0);
}

#[test]
fn summary_of_rounds() {
    use evd_bench::stats::Summary;
    let s = Summary::of(&[3.0, 1.0, 2.0, 10.0]).unwrap();
    assert_eq!((s.median, s.min, s.max, s.samples), (2.5, 1.0, 10.0, 4));
}

#[test]
fn quotient_of_zero_is_none() {
    assert_eq!(evd_bench::stats::quotient(3.0, 2.0), Some(1.5));
    assert_eq!(evd_bench::stats::quotient(3.0, 0.0), None);
}
