#!/usr/bin/env bash
set -euo pipefail

BACKUP_DIR="${BACKUP_DIR:-/var/backups}"

# Print a message with a timestamp.
log() {
  printf '%s %s\n' "$(date +%T)" "$*"
}

function archive {
  local source="$1"
  tar -czf "$BACKUP_DIR/$(basename "$source").tgz" "$source"
  log "archived $source"
}

prune() {
  find "$BACKUP_DIR" -name '*.tgz' -mtime +14 -delete
}

for dir in "$@"; do
  archive "$dir"
done
prune
log "done with $# folders"
