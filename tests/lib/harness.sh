# Sourced by the shell suites (tests/{slurm,prolog,packaging,container}/run.sh): the counters,
# `fail`, running one test, and the closing tally. Each suite's own run_test does its setup (filter,
# reset, idle nodes) and then calls harness_run.
PASSED=0 FAILED=0 STARTED=0 FAILED_NAMES=() TEST_FAILED=0

# Inside a test: report why and mark the test failed (the test goes on unless it returns).
fail() { echo "    $*" >&2; TEST_FAILED=1; return 1; }

harness_run() { # name function
    local name=$1 start=$SECONDS
    STARTED=$((STARTED + 1))     # a test aborted by a shell error is caught by the tally
    TEST_FAILED=0
    "$2"
    if [ "$TEST_FAILED" = 0 ]; then
        echo "PASS  $name ($((SECONDS - start)) s)"
        PASSED=$((PASSED + 1))
    else
        echo "FAIL  $name ($((SECONDS - start)) s)"
        FAILED=$((FAILED + 1)); FAILED_NAMES+=("$name")
    fi
}

harness_tally() { # label; false when any test failed or aborted
    if [ $((PASSED + FAILED)) != "$STARTED" ]; then
        echo "$1: $((STARTED - PASSED - FAILED)) test(s) aborted by a shell error (see above)"
        FAILED=$((STARTED - PASSED))
    fi
    echo "$1: $PASSED passed, $FAILED failed"
    for n in "${FAILED_NAMES[@]+"${FAILED_NAMES[@]}"}"; do echo "  failed: $n"; done
    [ "$FAILED" = 0 ]
}
