#!/bin/sh
# Writes a program's manual page from its --help (help2man), gzipped, at build time.
#
#   man_page.sh HELP2MAN PROGRAM NAME SECTION VERSION DESCRIPTION OUTPUT.gz
#
# NAME is what the page calls the program (vrdma, vrdmad). A program whose help lists
# subcommands (CLI11's "Subcommands:" section, as vrdma's) gets the help of every subcommand,
# at every depth, in a section COMMANDS of its page, so that `man vrdma` holds all of it.
set -eu

help2man=$1 program=$2 name=$3 section=$4 version=$5 description=$6 output=$7
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The names listed under "Subcommands:" in a help text (stdin).
subcommands() {
  awk '/^Subcommands:/ { on = 1; next }
       on && /^[^ ]/ { on = 0 }
       on && /^  [a-z][a-z0-9-]*( |$)/ { print $1 }'
}

# Roff for preformatted text (stdin): backslashes escaped, '-' an ASCII minus (options stay
# typeable), and no line taken for a request.
preformatted() {
  printf '.nf\n'
  sed -e 's/\\/\\e/g' -e 's/-/\\-/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"
  printf '.fi\n'
}

# The help of "program sub..." and, below it, of each of its subcommands.
describe() {
  text=$("$program" "$@" --help 2>&1) || {
    echo "man_page.sh: '$name $*' --help failed:" >&2
    echo "$text" >&2
    exit 1
  }
  printf '.SS "%s %s"\n' "$name" "$*"
  printf '%s\n' "$text" | preformatted
  for sub in $(printf '%s\n' "$text" | subcommands); do
    describe "$@" "$sub"
  done
}

include="$work/include.h2m"
: > "$include"
top=$("$program" --help)
if [ -n "$(printf '%s\n' "$top" | subcommands)" ]; then
  {
    printf '[COMMANDS]\n'
    printf 'Each command with its options, as its own --help prints them.\n'
    for sub in $(printf '%s\n' "$top" | subcommands); do
      describe "$sub"
    done
  } >> "$include"
fi

set --
[ -s "$include" ] && set -- --include="$include"
"$help2man" --no-info --no-discard-stderr --section="$section" --name="$description" \
  --version-string="$version" "$@" --output="$work/page" "$program"
gzip -9n < "$work/page" > "$output.tmp"
mv "$output.tmp" "$output"
