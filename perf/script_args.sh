# Sourced by the perf scripts, before they run anything: `script_args KIND "$@"` prints the
# script's header comment for -h/--help and exits 0, and refuses arguments the script does not
# take. KIND is `rounds` (one optional argument: a whole number of rounds, 1 or more) or
# `none`.
script_args() {
  local kind=$1 script name
  shift
  script=${BASH_SOURCE[1]}
  name=$(basename "$script")
  case "${1:-}" in
    -h | --help)
      awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$script"
      exit 0
      ;;
  esac
  if [ "$kind" = rounds ]; then
    if [ $# -gt 1 ] || { [ $# -eq 1 ] && ! [[ $1 =~ ^[1-9][0-9]*$ ]]; }; then
      echo "$name: the one argument is the number of rounds, a whole number of 1 or more, not '$*' (see $name --help)" >&2
      exit 2
    fi
  elif [ $# -gt 0 ]; then
    echo "$name: takes no arguments, not '$*' (see $name --help)" >&2
    exit 2
  fi
}
