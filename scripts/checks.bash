# The checks of the end-to-end test scripts (test-install, test-deb,
# test-fresh-run), sourced by each: one line per check, "ok" or "FAIL" with
# what went wrong indented under it, and "N passed, N failed" last.
#
#   source "$(dirname "$0")/checks.bash"
#   pass NAME | fail NAME [DETAIL] | check NAME COMMAND... | finish

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok    $1"; }
fail() { failed=$((failed + 1)); echo "FAIL  $1"; [[ $# -lt 2 ]] || printf '%s\n' "$2" | sed 's/^/      /' | head -40; }
check() { # check NAME COMMAND...: passes when the command succeeds
    local name="$1"; shift
    local out
    if out="$("$@" 2>&1)"; then pass "$name"; else fail "$name" "$out"; fi
}
# Exits 0 when no check failed, else 1.
finish() {
    echo "$passed passed, $failed failed"
    [[ $failed -eq 0 ]]
    exit $?
}
