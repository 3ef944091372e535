# bash completion for cudafix (installed as share/bash-completion/completions/cudafix).
# tests/release/test_release.py keeps the commands and options here those of `cudafix --help`;
# tests/e2e/test_command_line.cpp calls _cudafix as bash would.

# The words `cudafix __complete KIND` lists (rules: the rule ids; dists: the environment's dist
# names), for the environment the command line names with --venv or -p/--python.
_cudafix_words() {
  local kind=$1 i where=()
  for ((i = 1; i < cword; i++)); do
    case ${words[i]} in
      --venv | --python | -p) where+=("${words[i]}" "${words[i + 1]}") ;;
      --venv=* | --python=*) where+=("${words[i]}") ;;
    esac
  done
  "${words[0]}" "${where[@]}" __complete "$kind" 2>/dev/null
}

_cudafix() {
  local cur prev words cword
  _init_completion 2>/dev/null || {
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD - 1]}
    words=("${COMP_WORDS[@]}")
    cword=$COMP_CWORD
  }
  local commands="scan why doctor verify plan rules explain remove install apply fix sync lock history rollback snapshot guard demo version help"
  local global="--help --version --venv --python --json --lock-timeout --color --quiet --verbose --ld-library-path
    --ld-so-cache --threads --timings --no-cache --find-links --python-platform --python-version --index-url --extra-index-url --no-index --offline
    --http-timeout --retries --rules"
  case $prev in
    --venv | --find-links) COMPREPLY=($(compgen -d -- "$cur")); return ;;
    --rules | --ld-so-cache | --consumer | -o | --output | --lock) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --color) COMPREPLY=($(compgen -W "auto always never" -- "$cur")); return ;;
    --select | --ignore)
      # A comma-separated list: the id being typed after the last comma.
      local listed="" typing=$cur
      [[ $cur == *,* ]] && { listed=${cur%,*},; typing=${cur##*,}; }
      COMPREPLY=($(compgen -P "$listed" -W "$(_cudafix_words rules)" -- "$typing")); return ;;
    --python | -p | --index-url | --extra-index-url | --threads | --lock-timeout | --http-timeout | --retries | \
      --timeout | --cuda-major | --snapshot | --delete | --ld-library-path) return ;;
  esac
  local command="" sub="" i
  for ((i = 1; i < cword; i++)); do
    case ${words[i]} in
      --venv | --python | -p | --find-links | --rules | --ld-so-cache | --ld-library-path | --color | --threads | \
        --lock-timeout | --index-url | --extra-index-url | --http-timeout | --retries) ((i++)) ;;  # and its value
      -*) ;;
      *) if [ -z "$command" ]; then command=${words[i]}; elif [ "$command" = plan ] && [ -z "$sub" ]; then sub=${words[i]}; fi ;;
    esac
  done
  local own=""
  case $command in
    "") COMPREPLY=($(compgen -W "$commands $global -V" -- "$cur")); return ;;
    plan) [ -z "$sub" ] && { COMPREPLY=($(compgen -W "remove fix" -- "$cur")); return; }
      [ "$sub" = fix ] && own="--cuda-major --output"
      [ "$sub" = remove ] && [[ $cur != -* ]] && { COMPREPLY=($(compgen -W "$(_cudafix_words dists)" -- "$cur")); return; } ;;
    doctor) own="--verify-hashes --select --ignore --lock" ;;
    lock) own="--output --verified --timeout" ;;
    verify) own="--timeout --consumer --nccl" ;;
    remove) own="--force --dry-run --yes --break-system-packages"
      [[ $cur != -* ]] && { COMPREPLY=($(compgen -W "$(_cudafix_words dists)" -- "$cur")); return; } ;;
    install) own="--no-verify --dry-run --yes --break-system-packages"; [[ $cur != -* ]] && { COMPREPLY=($(compgen -f -X '!*.whl' -- "$cur") $(compgen -d -- "$cur")); return; } ;;
    apply) own="--no-verify --yes --break-system-packages"; [[ $cur != -* ]] && { COMPREPLY=($(compgen -f -- "$cur")); return; } ;;
    fix) own="--cuda-major --dry-run --no-verify --yes --break-system-packages" ;;
    sync) own="--dry-run --no-verify --require-hashes --yes --break-system-packages"; [[ $cur != -* ]] && { COMPREPLY=($(compgen -f -- "$cur")); return; } ;;
    rollback) own="--snapshot --force --dry-run --yes --break-system-packages" ;;
    snapshot) own="--list --delete --yes --break-system-packages" ;;
    guard) local k; for ((k = 1; k < cword; k++)); do [ "${words[k]}" = -- ] && { COMPREPLY=($(compgen -c -- "$cur")); return; }; done
      own="--allow-break --keep --no-verify --break-system-packages --" ;;
    explain) [[ $cur != -* ]] && { COMPREPLY=($(compgen -W "$(_cudafix_words rules)" -- "$cur")); return; } ;;
    demo) [[ $cur != -* ]] && { COMPREPLY=($(compgen -d -- "$cur")); return; } ;;
    help) [[ $cur != -* ]] && { COMPREPLY=($(compgen -W "$commands" -- "$cur")); return; } ;;
  esac
  COMPREPLY=($(compgen -W "$own $global" -- "$cur"))
}
complete -F _cudafix cudafix
