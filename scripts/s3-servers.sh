#!/usr/bin/env bash
# Kept for callers of the old name: the test servers are now started by scripts/stores.sh,
# which starts fake-gcs-server and Azurite beside moto and MinIO (same commands and options).
exec "$(dirname "${BASH_SOURCE[0]}")/stores.sh" "$@"
