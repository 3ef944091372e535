#!/bin/zsh -f
# What zsh's completion offers for a command line, one match a line: an interactive zsh on a
# pseudo-terminal (zpty) with compinit and the completion functions of FOLDER, the line typed and
# TAB pressed, each match compadd is given printed between two markers.
# Matches zsh adds itself (compdescribe, for a long _describe list and an empty word) are not
# seen: the tests type a word's first letters.
# usage: zsh_complete.zsh FOLDER 'cudafix explain sha'
zmodload zsh/zpty || { echo 'zsh/zpty is missing' >&2; exit 2 }
zpty z zsh -f -i
zpty -w z "PROMPT= RPROMPT= ; unsetopt zle_bracketed_paste 2>/dev/null"
zpty -w z "fpath=(${(q)1} \$fpath); autoload -Uz compinit; compinit -u -D"
zpty -w z "zstyle ':completion:*' list-grouped false; zstyle ':completion:*' insert-tab false"
# Every match is printed as compadd receives it; nothing is inserted.
zpty -w z 'compadd() {
  if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then builtin compadd "$@"; return $?; fi
  local -a __hits
  builtin compadd -A __hits "$@"
  local h; for h in $__hits; do print -r -- "MATCH:$h"; done
}'
zpty -w z '_cf_begin() { print -r -- "BEGIN-""MATCHES" }; _cf_end() { print -r -- "END-""MATCHES"; exit }'
zpty -w z 'compprefuncs=(_cf_begin); comppostfuncs=(_cf_end)'
zpty -w z "bindkey '^I' complete-word"
zpty -n -w z "$2"$'\t'
# Everything the terminal shows up to the end marker (the echo of its definition aside).
local out
zpty -r z out '*END-MATCHES*' || { echo 'zsh ended before completing' >&2; exit 2 }
integer on=0
local line
for line in ${(f)out}; do
  line=${line//$'\r'/}
  [[ $line == *BEGIN-MATCHES* ]] && { on=1; continue }
  (( on )) && [[ $line == MATCH:* ]] && print -r -- ${line#MATCH:}
done
zpty -d z
