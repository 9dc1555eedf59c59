"""The messages and stub generated from api/proto/stasis/v1/stasis.proto."""
