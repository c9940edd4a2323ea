# shellcheck shell=bash
# Sourced by tests/admin-path/{run,fresh-build}.sh: the commands of the admin page's section "For the
# admin with ten minutes" (docs/admin.md), as the admin sees them. Every command there is in a fenced `sh` block inside
# a numbered step; block B of step S is written, without its list indentation, to DIR/S.B.sh.
# Anything else that looks like a command the admin is to run (an indented code block, a fence of
# another language, a block outside a step) is reported, so that no command can be shown in the
# section without the suite running it.

# The page, relative to the repository; site.sh reads the same section of it.
ADMIN_DOC=docs/admin.md
ADMIN_SECTION='## For the admin with ten minutes'

# readme_blocks PAGE DIR: writes DIR/S.B.sh; prints "BLOCK S.B" per block in order and
# "PROBLEM <text>" per thing the suite could not run as shown.
readme_blocks() {
    local readme=$1 dir=$2
    mkdir -p "$dir" || return 1
    awk -v head="$ADMIN_SECTION" -v dir="$dir" '
        $0 == head { inside = 1; seen = 1; next }
        inside && /^## / { inside = 0 }
        !inside { next }
        fence {
            if (substr($0, 1, length(ind) + 3) == ind "```" && $0 ~ /^ *```[[:space:]]*$/) {
                fence = 0; close(file); next
            }
            line = $0
            if (line != "" && substr(line, 1, length(ind)) != ind) {
                print "PROBLEM block " id " has a line left of its fence: " line
            }
            print substr(line, length(ind) + 1) > file
            next
        }
        /^[0-9]+\. / { step = $0; sub(/\..*/, "", step); block = 0; next }
        /^ *```/ {
            lang = $0; sub(/^ *```/, "", lang); sub(/[[:space:]]+$/, "", lang)
            ind = $0; sub(/```.*/, "", ind)
            if (lang != "sh") print "PROBLEM a ```" lang " block (only ```sh blocks are run): " $0
            if (step == "") print "PROBLEM a block before step 1"
            block++; id = step "." block; file = dir "/" id ".sh"; fence = 1
            printf "" > file
            print "BLOCK " id
            next
        }
        /^       +[^ ]/ { print "PROBLEM an indented code line outside a ```sh block: " $0 }
        END {
            if (!seen) print "PROBLEM no section \"" head "\""
            if (fence) print "PROBLEM block " id " is not closed"
        }
    ' "$readme"
}
