# Sourced by scripts/stores.sh and scripts/postgres.sh: the servers a script starts belong to
# the env file it writes, so two runs in one work tree with different env files never stop each
# other's servers. Needs STATE (the script's state directory).

# use_env_file ENV_FILE: ENV_FILE made absolute, and RUN, the directory of its servers' PIDs,
# data dirs and logs (named by a checksum of the env file's path).
use_env_file() {
  mkdir -p "$(dirname "$1")"
  ENV_FILE=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
  local id
  id=$(printf '%s' "$ENV_FILE" | cksum | cut -d' ' -f1)
  RUN=$STATE/run-$id
  mkdir -p "$RUN"
}
