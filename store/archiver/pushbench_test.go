//go:build pullbench

package archiver_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/archiver"
	"github.com/stasis-run/stasis/store/local"
	"github.com/stasis-run/stasis/store/location"
	"github.com/stasis-run/stasis/testkit/s3test"
)

// TestPushBench: the push of a weights-like snapshot into a local store
// folder and into S3 (versitygw on loopback, testkit/s3test), one after the
// other in each run, the snapshot's bytes in the page cache for both:
//
//	go test -tags pullbench -run TestPushBench -v -timeout 60m ./store/archiver
//
// STASIS_PUSH_GIB sets the snapshot's size (default 2), STASIS_PUSH_RUNS
// the runs (default 3), STASIS_BENCH_DIR the folder (default the system
// temp folder), STASIS_PUSH_UPLOADS the packs written at once (default the
// push's own). Each run pushes to S3 twice: the bodies checked by a CRC32C
// trailer (the default) and signed every 64 KiB (trailer=false, the PUT
// before session 17). versitygw must be on PATH
// (scripts/install-versitygw.sh).
func TestPushBench(t *testing.T) {
	gib := envInt(t, "STASIS_PUSH_GIB", 2)
	runs := envInt(t, "STASIS_PUSH_RUNS", 3)
	uploads := 0 // the push's default
	if os.Getenv("STASIS_PUSH_UPLOADS") != "" {
		uploads = envInt(t, "STASIS_PUSH_UPLOADS", 0)
	}
	base, err := os.MkdirTemp(os.Getenv("STASIS_BENCH_DIR"), "pushbench-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	ctx := context.Background()
	src := filepath.Join(base, "snap")
	weightsLike(t, src, int64(gib)<<30)
	srv := s3test.Start(t)
	push := func(repo *store.Repository) float64 {
		start := time.Now()
		if _, err := archiver.Save(ctx, repo, "s", src, archiver.Options{Uploads: uploads}); err != nil {
			t.Fatal(err)
		}
		return time.Since(start).Seconds()
	}
	fmt.Printf("| run | snapshot | push, local folder | push, S3 (versitygw, loopback), CRC32C trailer | signed pieces | S3 / local |\n|---|---|---|---|---|---|\n")
	for run := 1; run <= runs; run++ {
		be, err := local.New(filepath.Join(base, fmt.Sprintf("repo-%d", run)))
		if err != nil {
			t.Fatal(err)
		}
		repo, err := store.Init(ctx, be)
		if err != nil {
			t.Fatal(err)
		}
		localS := push(repo)
		os.RemoveAll(filepath.Join(base, fmt.Sprintf("repo-%d", run)))
		pushS3 := func(bucket, query string) float64 {
			sbe, err := location.Open(ctx, srv.Location(bucket)+query, srv.Env)
			if err != nil {
				t.Fatal(err)
			}
			srepo, err := store.Init(ctx, sbe)
			if err != nil {
				t.Fatal(err)
			}
			return push(srepo)
		}
		s3S := pushS3(fmt.Sprintf("push-%d", run), "")
		signedS := pushS3(fmt.Sprintf("push-signed-%d", run), "&trailer=false")
		fmt.Printf("| %d | %d GiB | %.2f s | %.2f s | %.2f s | %.2fx, %.2fx |\n", run, gib, localS, s3S, signedS, s3S/localS, signedS/localS)
	}
}
