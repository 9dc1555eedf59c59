// Package location opens a repository backend from its location string:
// a folder path for the local backend, or
//
//	s3://BUCKET[/PREFIX]?endpoint=HOST:PORT[&insecure=true][&region=R][&create=true][&stall=30s]
//	gs://BUCKET[/PREFIX][?credentials=KEYFILE][&create=true&project=P][&stall=30s]
//
// with S3's credentials taken from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, and GCS's found the usual way (Application
// Default Credentials) unless a service account key file is named;
// STORAGE_EMULATOR_HOST points the GCS client at an emulator.
// Every backend comes wrapped with retries for transient failures (Retries;
// stall sets how long a remote read may go without a byte before it is
// resumed).
package location

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/gcs"
	"github.com/stasis-run/stasis/store/local"
	"github.com/stasis-run/stasis/store/s3"
)

// Retries is how every backend opened here retries transient failures: 10
// attempts, from 200 ms apart doubling up to 5 s (26 s of waits in all, as
// the cloud SDKs' own defaults ride out a bad minute: 4 attempts 4 s apart
// in all failed pushes under a 503 to every third request), and a read that
// gets no byte for 30 s resumed.
var Retries = store.RetryPolicy{Attempts: 10, Backoff: 200 * time.Millisecond, MaxBackoff: 5 * time.Second, Stall: 30 * time.Second}

// Open returns the backend at loc. getenv supplies the credentials.
func Open(ctx context.Context, loc string, getenv func(string) string) (store.Backend, error) {
	if !strings.Contains(loc, "://") {
		be, err := local.New(loc)
		if err != nil {
			return nil, err
		}
		return store.WithRetry(be, Retries), nil
	}
	u, err := url.Parse(loc)
	if err != nil {
		return nil, fmt.Errorf("store location %q: %w", loc, err)
	}
	q := u.Query()
	retries := Retries
	if v := q.Get("stall"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("store location %q: stall=%q: want a positive duration such as 30s", loc, v)
		}
		retries.Stall = d
	}
	switch u.Scheme {
	case "s3":
	case "gs":
		project := q.Get("project")
		if project == "" {
			project = getenv("GOOGLE_CLOUD_PROJECT")
		}
		be, err := gcs.New(ctx, gcs.Config{Bucket: u.Host, Prefix: strings.TrimPrefix(u.Path, "/"), CredentialsFile: q.Get("credentials"),
			CreateBucket: q.Get("create") == "true", Project: project})
		if err != nil {
			return nil, err
		}
		return store.WithRetry(be, retries), nil
	default:
		return nil, fmt.Errorf("store location %q: unknown scheme %q (want a folder path, s3:// or gs://)", loc, u.Scheme)
	}
	noTrailer := false
	switch v := q.Get("trailer"); v {
	case "", "true":
	case "false":
		noTrailer = true
	default:
		return nil, fmt.Errorf("store location %q: trailer=%q: want true or false", loc, v)
	}
	cfg := s3.Config{
		Endpoint:     q.Get("endpoint"),
		Insecure:     q.Get("insecure") == "true",
		Region:       q.Get("region"),
		Bucket:       u.Host,
		Prefix:       strings.TrimPrefix(u.Path, "/"),
		AccessKey:    getenv("AWS_ACCESS_KEY_ID"),
		SecretKey:    getenv("AWS_SECRET_ACCESS_KEY"),
		CreateBucket: q.Get("create") == "true",
		NoTrailer:    noTrailer,
	}
	if cfg.Endpoint == "" {
		cfg.Endpoint = "s3.amazonaws.com"
	}
	if cfg.AccessKey == "" || cfg.SecretKey == "" {
		return nil, fmt.Errorf("store location %q: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", loc)
	}
	be, err := s3.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return store.WithRetry(be, retries), nil
}

// FromEnv is Open with the process's environment.
func FromEnv(ctx context.Context, loc string) (store.Backend, error) {
	return Open(ctx, loc, os.Getenv)
}

// Repository opens the repository at loc (credentials from the
// environment). With create, a location that holds no repository yet gets
// a new one: the embedded local store is made on first use that way, while
// any other location must be made on purpose with `stasis store init`.
func Repository(ctx context.Context, loc string, create bool) (*store.Repository, error) {
	be, err := FromEnv(ctx, loc)
	if err != nil {
		return nil, err
	}
	r, err := store.Open(ctx, be)
	if err != nil && create {
		if r, initErr := store.Init(ctx, be); initErr == nil {
			return r, nil
		}
	}
	return r, err
}
