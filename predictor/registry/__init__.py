"""The model registry: `models/<version>/manifest.json` + artifacts, `models/latest` -> newest good.

A version folder holds `manifest.json` (schema version, created, data window, library versions, and
the sha256 of every artifact), `manifest.sha256` (the digest of the manifest's bytes, in
`sha256sum` format), optionally `manifest.sig` (HMAC-SHA256 of that digest with a key from a file),
and the artifacts: `series.json` (per-series model, parameters, backtest scores), `profiles.json`,
`recent.parquet`, and the global model as `global_gbm.json` + `global_gbm.npz` (plain arrays).
No artifact is a pickle: nothing read from a registry can run code (docs/forecasting.md, "Registry
format and trust"). Loading checks the manifest digest (and the signature when a key is given),
then the schema version and every artifact checksum, refuses any unlisted file, and only then
parses the artifacts; a version that fails — or that verifies but does not load — is refused with
a clear `RegistryError`, and the serving loop keeps its last good version (`load_last_good`).
`training` writes versions (`write_version`); serving only reads them, which is why this package
lives in `predictor` (the `autoscaler` may not import `training`).

The package reads, writes and verifies only; forecasting with a loaded version is
`predictor.pipeline.serving.forecast_version` (the pipeline reads the registry, never the other way).
Modules: `manifest` (the chain of trust: digest, signature, checksums, the cheap re-check of a loaded
version), `writing` (atomic writes, `latest`), `loading` (resolve, verify, parse, fall back to the
last good version), `probe` (a version's LightGBM models loaded in a child process first).
"""
from predictor.registry.loading import (RegistryVersion, check_unchanged, list_versions, load_last_good, load_recent,
                                        load_version, resolve)
from predictor.registry.manifest import (GLOBAL_ARRAYS, GLOBAL_META, LATEST, MANIFEST, MANIFEST_DIGEST, MIN_KEY_BYTES,
                                         PROFILES_FILE, RECENT_FILE, SCHEMA_VERSION, SERIES_FILE, SIGNATURE,
                                         RegistryError, Seal, UnloadableVersion, read_key, sha256_file, verify,
                                         verify_sealed)
from predictor.registry.writing import library_versions, new_version_name, switch_latest, write_version

__all__ = ["GLOBAL_ARRAYS", "GLOBAL_META", "LATEST", "MANIFEST", "MANIFEST_DIGEST", "MIN_KEY_BYTES", "PROFILES_FILE",
           "RECENT_FILE", "SCHEMA_VERSION", "SERIES_FILE", "SIGNATURE", "RegistryError", "RegistryVersion", "Seal",
           "UnloadableVersion", "check_unchanged", "library_versions", "list_versions", "load_last_good", "load_recent",
           "load_version", "new_version_name", "read_key", "resolve", "sha256_file", "switch_latest", "verify",
           "verify_sealed", "write_version"]
