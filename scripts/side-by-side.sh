# Sourced by .ci/run and scripts/ci-verbs (not run on its own).
#
# side_by_side A... -- B...: run the commands A and B at once, print each
# one's output after both have ended (A's first), and fail if either failed.
# A may be a shell function of the sourcing script.
side_by_side() {
    local a=() b=() status_a=0 status_b=0 out pid
    while [ "$1" != -- ]; do a+=("$1"); shift; done
    shift
    b=("$@")
    out="$(mktemp -d)"
    "${a[@]}" >"$out/a" 2>&1 & pid=$!
    "${b[@]}" >"$out/b" 2>&1 || status_b=$?
    wait "$pid" || status_a=$?
    echo "--- ${a[*]} (exit $status_a)"; cat "$out/a"
    echo "--- ${b[*]} (exit $status_b)"; cat "$out/b"
    rm -rf "$out"
    [ "$status_a" -eq 0 ] && [ "$status_b" -eq 0 ]
}
