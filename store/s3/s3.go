// Package s3 stores a repository's objects in an S3-compatible bucket
// (AWS S3, MinIO, versitygw, Ceph RGW ...) under an optional key prefix.
// An S3 PUT is atomic: an object is visible whole or not at all.
package s3

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/store"
)

// Config says where the bucket is and how to sign in.
type Config struct {
	// Endpoint is host[:port] of the S3 service, such as
	// s3.us-east-1.amazonaws.com or 127.0.0.1:7070.
	Endpoint string
	// Insecure talks plain HTTP instead of HTTPS.
	Insecure bool
	Region   string
	Bucket   string
	// Prefix is prepended to every key ("team/stasis/").
	Prefix    string
	AccessKey string
	SecretKey string
	// CreateBucket makes the bucket when it does not exist.
	CreateBucket bool
	// NoTrailer sends PUTs without the CRC32C trailer, as for a server
	// that refuses it (bodyCheck), without asking: for a server, or a
	// proxy in front of one, that takes the first small body but not
	// later ones.
	NoTrailer bool
}

// Backend is a bucket.
type Backend struct {
	// client sends a PUT's body with a CRC32C of it in a trailer, which
	// the server checks before it stores the object; untrailed does not,
	// for a server that takes no trailers (bodyCheck).
	client, untrailed *minio.Client
	cfg               Config

	mu    sync.Mutex
	check bodyCheck // decided at the first Put
	// testSlot holds the one test of the server under way; a Put that
	// waits for its answer gives up with its context.
	testSlot chan struct{}
}

// bodyCheck is how the server checks a PUT's body on the way in. Over
// plain HTTP a body is otherwise signed every 64 KiB: a SHA-256 and an
// HMAC per piece on both ends, which made a push to a server on loopback
// a third longer on 2 cores (TestPushBench). A CRC32C catches what the network does
// to the bytes at a fraction of that; what an attacker on the path could
// do is caught where it matters, as every chunk read back is checked
// against its hash. Over HTTPS the body is otherwise checked by TLS alone.
type bodyCheck int

const (
	checkUndecided bodyCheck = iota
	checkCRC32C              // STREAMING-UNSIGNED-PAYLOAD-TRAILER, x-amz-checksum-crc32c
	checkLegacy              // signed pieces over HTTP, TLS alone over HTTPS
)

// BodyCheck says how the server checks what is written to it: "crc32c
// trailer", "signed chunks" or "tls", or "" before the first write.
func (b *Backend) BodyCheck() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.check == checkCRC32C:
		return "crc32c trailer"
	case b.check == checkLegacy && b.cfg.Insecure:
		return "signed chunks"
	case b.check == checkLegacy:
		return "tls"
	}
	return ""
}

var _ store.Backend = (*Backend)(nil)

// New connects and checks that the bucket is there and the credentials are
// accepted, so that a wrong key fails here with its reason.
func New(ctx context.Context, cfg Config) (*Backend, error) {
	if cfg.Bucket == "" || cfg.Endpoint == "" {
		return nil, errors.New("s3 store: an endpoint and a bucket are needed")
	}
	if cfg.Prefix != "" && !strings.HasSuffix(cfg.Prefix, "/") {
		cfg.Prefix += "/"
	}
	newClient := func(trailers bool) (*minio.Client, error) {
		return minio.New(cfg.Endpoint, &minio.Options{
			Creds:           credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
			Secure:          !cfg.Insecure,
			Region:          cfg.Region,
			TrailingHeaders: trailers,
		})
	}
	client, err := newClient(true)
	if err != nil {
		return nil, fmt.Errorf("s3 store %s: %w", cfg.Endpoint, err)
	}
	untrailed, err := newClient(false)
	if err != nil {
		return nil, fmt.Errorf("s3 store %s: %w", cfg.Endpoint, err)
	}
	b := &Backend{client: client, untrailed: untrailed, cfg: cfg, testSlot: make(chan struct{}, 1)}
	if cfg.NoTrailer {
		b.check = checkLegacy
	}
	exists, err := client.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		err = b.wrap("open bucket", "", err)
		if !store.IsPermanent(err) {
			// Not an answer: the endpoint is down or unreachable.
			err = errdefs.Mark(err, errdefs.ErrUnavailable)
		}
		return nil, err
	}
	if !exists {
		if !cfg.CreateBucket {
			return nil, fmt.Errorf("s3 store %s: bucket %q does not exist (create it, or ask for it to be created)", b.Location(), cfg.Bucket)
		}
		if err := client.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: cfg.Region}); err != nil {
			return nil, b.wrap("create bucket", "", err)
		}
	}
	return b, nil
}

func (b *Backend) Location() string {
	scheme := "https"
	if b.cfg.Insecure {
		scheme = "http"
	}
	return fmt.Sprintf("s3 %s://%s/%s/%s", scheme, b.cfg.Endpoint, b.cfg.Bucket, b.cfg.Prefix)
}

// wrap names the operation and key, maps a missing object to
// store.ErrNotExist and says what a refused credential means.
func (b *Backend) wrap(op, key string, err error) error {
	resp := minio.ToErrorResponse(err)
	switch {
	case resp.Code == "NoSuchKey":
		return fmt.Errorf("%s: %s: %w", b.Location(), key, store.ErrNotExist)
	case resp.StatusCode == http.StatusForbidden || resp.Code == "AccessDenied" || resp.Code == "SignatureDoesNotMatch" || resp.Code == "InvalidAccessKeyId":
		return store.Permanent(fmt.Errorf("%s: %s %s: the credentials were refused (%s: %s); check the access key and secret", b.Location(), op, key, resp.Code, resp.Message))
	}
	return fmt.Errorf("%s: %s %s: %w", b.Location(), op, key, err)
}

func (b *Backend) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := store.CheckKey(key); err != nil {
		return fmt.Errorf("%s: %w", b.Location(), err)
	}
	check, err := b.bodyCheck(ctx)
	if err != nil {
		return err
	}
	src := &countingReader{r: r}
	_, err = b.put(ctx, check, b.cfg.Prefix+key, src, size)
	// A source of the wrong size is the caller's mistake, not the
	// network's: no retry can help.
	if err != nil && src.ended && src.n < size {
		return errdefs.Mark(fmt.Errorf("%s: put %s: the source ended after %d of the %d bytes declared", b.Location(), key, src.n, size), errdefs.ErrInvalidArgument)
	}
	if err != nil && src.n > size {
		return errdefs.Mark(fmt.Errorf("%s: put %s: the source held more than the %d bytes declared", b.Location(), key, size), errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return b.wrap("put", key, err)
	}
	return nil
}

// put writes one object, its body checked as check says.
func (b *Backend) put(ctx context.Context, check bodyCheck, key string, r io.Reader, size int64) (minio.UploadInfo, error) {
	opts := minio.PutObjectOptions{
		ContentType: "application/octet-stream",
		// A repository's objects are small (a pack is closed once it
		// passes the repository's pack size, 16 MiB by default): one PUT
		// each, not a multipart upload of a 16 MiB part and a small one
		// (three more requests per pack).
		DisableMultipart: true,
	}
	if check == checkCRC32C {
		// Unsigned, so that the CRC32C goes in a trailer over plain
		// HTTP too (with the pieces signed it would not be sent).
		opts.DisableContentSha256 = true
		opts.Checksum = minio.ChecksumCRC32C
		return b.client.PutObject(ctx, b.cfg.Bucket, key, r, size, opts)
	}
	return b.untrailed.PutObject(ctx, b.cfg.Bucket, key, r, size, opts)
}

// bodyCheck decides, at the first Put, whether the server takes a body
// with a CRC32C trailer: it writes a small object so, reads it back and
// deletes it. Not every S3-compatible server does; one that refuses the
// trailer, or stores the body still in its chunked encoding, gets the
// PUT of before (checkLegacy). Until the test gets an answer (the network
// fails, the server is busy or hangs) nothing is decided and the Put fails
// as it would; Puts that wait for the test give up with their contexts.
func (b *Backend) bodyCheck(ctx context.Context) (bodyCheck, error) {
	if check := b.decided(); check != checkUndecided {
		return check, nil
	}
	select {
	case b.testSlot <- struct{}{}:
		defer func() { <-b.testSlot }()
	case <-ctx.Done():
		return checkUndecided, ctx.Err()
	}
	// Another Put may have decided while this one waited.
	if check := b.decided(); check != checkUndecided {
		return check, nil
	}
	check, err := b.testBody(ctx)
	if err == nil {
		b.mu.Lock()
		b.check = check
		b.mu.Unlock()
	}
	return check, err
}

func (b *Backend) decided() bodyCheck {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.check
}

// testBody writes a small object with a CRC32C trailer, reads it back and
// deletes it, and says how later bodies are to be checked.
func (b *Backend) testBody(ctx context.Context) (bodyCheck, error) {
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	// Beside the repository's folders, never listed; a test cut short
	// leaves only this name behind.
	key := "stasis-body-check-" + hex.EncodeToString(nonce)
	body := []byte("stasis: does this server check a PUT's body by a CRC32C trailer?\n")
	_, err := b.put(ctx, checkCRC32C, b.cfg.Prefix+key, bytes.NewReader(body), int64(len(body)))
	if err != nil {
		switch minio.ToErrorResponse(err).StatusCode {
		case http.StatusBadRequest, http.StatusLengthRequired, http.StatusNotImplemented:
			// Refused as a request it does not take.
			return checkLegacy, nil
		}
		// No answer, or not about the trailer (credentials, a missing
		// bucket, a busy server).
		return checkUndecided, b.wrap("put", key, err)
	}
	defer b.removeTestObject(ctx, b.cfg.Prefix+key)
	obj, err := b.client.GetObject(ctx, b.cfg.Bucket, b.cfg.Prefix+key, minio.GetObjectOptions{})
	if err != nil {
		return checkUndecided, b.wrap("get", key, err)
	}
	got, err := io.ReadAll(io.LimitReader(obj, 4<<10))
	obj.Close()
	if err != nil {
		return checkUndecided, b.wrap("get", key, err)
	}
	if !bytes.Equal(got, body) {
		return checkLegacy, nil
	}
	return checkCRC32C, nil
}

// removeTestObject removes the object of the body test; when the caller
// has given up meanwhile, in the background, so as not to hold it up.
func (b *Backend) removeTestObject(ctx context.Context, key string) {
	remove := func(ctx context.Context) {
		_ = b.client.RemoveObject(ctx, b.cfg.Bucket, key, minio.RemoveObjectOptions{})
	}
	if ctx.Err() == nil {
		remove(ctx)
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		remove(ctx)
	}()
}

// countingReader counts what a Put read, and whether its source ended.
type countingReader struct {
	r     io.Reader
	n     int64
	ended bool
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err == io.EOF {
		c.ended = true
	}
	return n, err
}

func (b *Backend) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := store.CheckKey(key); err != nil {
		return nil, fmt.Errorf("%s: %w", b.Location(), err)
	}
	opts := minio.GetObjectOptions{}
	if offset > 0 || length >= 0 {
		end := int64(0)
		if length >= 0 {
			end = offset + length - 1
		}
		if length == 0 {
			return io.NopCloser(strings.NewReader("")), nil
		}
		if err := opts.SetRange(offset, end); err != nil {
			return nil, err
		}
	}
	obj, err := b.client.GetObject(ctx, b.cfg.Bucket, b.cfg.Prefix+key, opts)
	if err != nil {
		return nil, b.wrap("get", key, err)
	}
	return &object{obj: obj, b: b, key: key}, nil
}

// object maps the errors a lazily fetched object reports on its first read.
type object struct {
	obj *minio.Object
	b   *Backend
	key string
}

func (o *object) Read(p []byte) (int, error) {
	n, err := o.obj.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = o.b.wrap("get", o.key, err)
	}
	return n, err
}

func (o *object) Close() error { return o.obj.Close() }

func (b *Backend) Size(ctx context.Context, key string) (int64, error) {
	if err := store.CheckKey(key); err != nil {
		return 0, fmt.Errorf("%s: %w", b.Location(), err)
	}
	info, err := b.client.StatObject(ctx, b.cfg.Bucket, b.cfg.Prefix+key, minio.StatObjectOptions{})
	if err != nil {
		return 0, b.wrap("stat", key, err)
	}
	return info.Size, nil
}

func (b *Backend) List(ctx context.Context, prefix string, fn func(string, int64) error) error {
	if err := store.CheckPrefix(prefix); err != nil {
		return fmt.Errorf("%s: %w", b.Location(), err)
	}
	for obj := range b.client.ListObjects(ctx, b.cfg.Bucket, minio.ListObjectsOptions{Prefix: b.cfg.Prefix + prefix, Recursive: true}) {
		if obj.Err != nil {
			return b.wrap("list", prefix, obj.Err)
		}
		if err := fn(strings.TrimPrefix(obj.Key, b.cfg.Prefix), obj.Size); err != nil {
			return err
		}
	}
	return nil
}

func (b *Backend) Delete(ctx context.Context, key string) error {
	if err := store.CheckKey(key); err != nil {
		return fmt.Errorf("%s: %w", b.Location(), err)
	}
	if err := b.client.RemoveObject(ctx, b.cfg.Bucket, b.cfg.Prefix+key, minio.RemoveObjectOptions{}); err != nil {
		return b.wrap("delete", key, err)
	}
	return nil
}
