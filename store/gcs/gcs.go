// Package gcs stores a repository's objects in a Google Cloud Storage
// bucket, under a prefix, through Google's client library. Credentials are
// found the usual way (Application Default Credentials: the environment's
// GOOGLE_APPLICATION_CREDENTIALS, gcloud's, a node's service account), or
// read from a service account key file; with STORAGE_EMULATOR_HOST set the
// client speaks to that emulator without credentials (the tests'
// fake-gcs-server). An upload is atomic: the object appears once whole.
package gcs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/store"
)

// Config says which bucket and how to reach it.
type Config struct {
	Bucket string
	// Prefix is the folder in the bucket that holds the repository.
	Prefix string
	// CredentialsFile is a service account key file; empty uses
	// Application Default Credentials.
	CredentialsFile string
	// CreateBucket makes the bucket, in Project, when it is missing.
	CreateBucket bool
	Project      string
}

// Backend is a bucket prefix of objects.
type Backend struct {
	client *storage.Client
	bucket *storage.BucketHandle
	cfg    Config
}

var _ store.Backend = (*Backend)(nil)

// New connects and checks that the bucket is there and the credentials are
// accepted, so that a wrong key fails here with its reason.
func New(ctx context.Context, cfg Config) (*Backend, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("gcs store: a bucket is needed")
	}
	if cfg.Prefix != "" && !strings.HasSuffix(cfg.Prefix, "/") {
		cfg.Prefix += "/"
	}
	var opts []option.ClientOption
	if cfg.CredentialsFile != "" {
		opts = append(opts, option.WithAuthCredentialsFile(option.ServiceAccount, cfg.CredentialsFile))
	}
	client, err := storage.NewClient(ctx, opts...)
	if err != nil {
		return nil, store.Permanent(fmt.Errorf("gcs store gs://%s: %w (check the credentials: GOOGLE_APPLICATION_CREDENTIALS, or credentials=KEYFILE in the location)", cfg.Bucket, err))
	}
	// The retrying backend (store.WithRetry) retries, within its budget,
	// and resumes broken reads: the library's own retries, which go on
	// until the caller's deadline, would hold an operation for as long.
	client.SetRetry(storage.WithPolicy(storage.RetryNever))
	b := &Backend{client: client, bucket: client.Bucket(cfg.Bucket), cfg: cfg}
	_, err = b.bucket.Attrs(ctx)
	if errors.Is(err, storage.ErrBucketNotExist) {
		if !cfg.CreateBucket {
			return nil, fmt.Errorf("%s: bucket %q does not exist (create it, or ask for it to be created)", b.Location(), cfg.Bucket)
		}
		err = b.bucket.Create(ctx, cfg.Project, nil)
	}
	if err != nil {
		err = b.wrap("open bucket", "", err)
		if !store.IsPermanent(err) {
			// Not an answer: the endpoint is down or unreachable.
			err = errdefs.Mark(err, errdefs.ErrUnavailable)
		}
		return nil, err
	}
	return b, nil
}

func (b *Backend) Location() string { return "gs://" + b.cfg.Bucket + "/" + b.cfg.Prefix }

// wrap names the operation and key, maps a missing object to
// store.ErrNotExist and says what a refused credential means.
func (b *Backend) wrap(op, key string, err error) error {
	var gerr *googleapi.Error
	switch {
	case errors.Is(err, storage.ErrObjectNotExist):
		return fmt.Errorf("%s: %s: %w", b.Location(), key, store.ErrNotExist)
	case errors.As(err, &gerr) && (gerr.Code == http.StatusForbidden || gerr.Code == http.StatusUnauthorized):
		return store.Permanent(fmt.Errorf("%s: %s %s: the credentials were refused (%d: %s); check them", b.Location(), op, key, gerr.Code, gerr.Message))
	case errors.As(err, &gerr) && (gerr.Code == http.StatusTooManyRequests || gerr.Code >= 500):
		return errdefs.Mark(fmt.Errorf("%s: %s %s: %w", b.Location(), op, key, err), errdefs.ErrUnavailable)
	}
	return fmt.Errorf("%s: %s %s: %w", b.Location(), op, key, err)
}

// Put uploads size bytes from r. The source is read whole before the
// upload starts (an object is at most a pack), so that one that fails or
// holds another size is refused and no request is made: no object of the
// wrong size appears, and an object already there stays as it was.
func (b *Backend) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := store.CheckKey(key); err != nil {
		return fmt.Errorf("%s: %w", b.Location(), err)
	}
	data, err := io.ReadAll(io.LimitReader(r, size+1))
	if err != nil {
		return fmt.Errorf("%s: put %s: reading the source: %w", b.Location(), key, err)
	}
	if int64(len(data)) != size {
		return errdefs.Mark(fmt.Errorf("%s: put %s: the source held %d bytes, not the %d declared", b.Location(), key, len(data), size), errdefs.ErrInvalidArgument)
	}
	w := b.bucket.Object(b.cfg.Prefix + key).NewWriter(ctx)
	w.ContentType = "application/octet-stream"
	// One request: a failed upload is tried again whole by the retrying
	// backend.
	w.ChunkSize = 0
	if _, err := w.Write(data); err != nil {
		_ = w.Close()
		return b.wrap("put", key, err)
	}
	if err := w.Close(); err != nil {
		return b.wrap("put", key, err)
	}
	return nil
}

func (b *Backend) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := store.CheckKey(key); err != nil {
		return nil, fmt.Errorf("%s: %w", b.Location(), err)
	}
	if length == 0 {
		return io.NopCloser(strings.NewReader("")), nil
	}
	rc, err := b.bucket.Object(b.cfg.Prefix+key).NewRangeReader(ctx, offset, length)
	if err != nil {
		return nil, b.wrap("get", key, err)
	}
	return rc, nil
}

func (b *Backend) Size(ctx context.Context, key string) (int64, error) {
	if err := store.CheckKey(key); err != nil {
		return 0, fmt.Errorf("%s: %w", b.Location(), err)
	}
	attrs, err := b.bucket.Object(b.cfg.Prefix + key).Attrs(ctx)
	if err != nil {
		return 0, b.wrap("stat", key, err)
	}
	return attrs.Size, nil
}

func (b *Backend) List(ctx context.Context, prefix string, fn func(string, int64) error) error {
	if err := store.CheckPrefix(prefix); err != nil {
		return fmt.Errorf("%s: %w", b.Location(), err)
	}
	it := b.bucket.Objects(ctx, &storage.Query{Prefix: b.cfg.Prefix + prefix})
	for {
		attrs, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return nil
		}
		if err != nil {
			return b.wrap("list", prefix, err)
		}
		if err := fn(strings.TrimPrefix(attrs.Name, b.cfg.Prefix), attrs.Size); err != nil {
			return err
		}
	}
}

func (b *Backend) Delete(ctx context.Context, key string) error {
	if err := store.CheckKey(key); err != nil {
		return fmt.Errorf("%s: %w", b.Location(), err)
	}
	err := b.bucket.Object(b.cfg.Prefix + key).Delete(ctx)
	if err != nil && !errors.Is(err, storage.ErrObjectNotExist) {
		return b.wrap("delete", key, err)
	}
	return nil
}
