package main

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// watchSyncTimeout bounds the wait for a watch's first listing: past it the
// command fails naming what it could not watch, rather than serving from
// an empty cache or waiting for ever.
const watchSyncTimeout = time.Minute

// watched is an informer cache of the kinds given, each filled by a watch
// from the API server as opts selects (namespaces, a field selector), and
// started and filled before it is returned: reads from it ask the API
// server nothing. Each kind is first listed once directly with the same
// selection, so that what a watch cannot do (RBAC, a field the installed
// CRD does not let be selected) is refused at once in the API server's own
// words, rather than retried in a log.
func watched(ctx context.Context, cfg *rest.Config, direct client.Client, opts cache.Options, kinds ...client.Object) (cache.Cache, error) {
	opts.Scheme = direct.Scheme()
	c, err := cache.New(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("informer cache: %w", err)
	}
	names := make([]string, len(kinds))
	for i, obj := range kinds {
		gvk, err := apiutil.GVKForObject(obj, opts.Scheme)
		if err != nil {
			return nil, err
		}
		names[i] = gvk.Kind + "s"
		list, err := direct.Scheme().New(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err != nil {
			return nil, err
		}
		sel, err := selection(direct, obj, opts)
		if err != nil {
			return nil, err
		}
		if err := direct.List(ctx, list.(client.ObjectList), append(sel, client.Limit(1))...); err != nil {
			return nil, fmt.Errorf("watch %s: %w (the CRDs and roles of this release's chart, deploy/helm/stasis or deploy/kube, let it)", names[i], err)
		}
	}
	go func() { _ = c.Start(ctx) }()
	syncCtx, cancel := context.WithTimeout(ctx, watchSyncTimeout)
	defer cancel()
	for i, obj := range kinds {
		if _, err := c.GetInformer(syncCtx, obj); err != nil {
			return nil, fmt.Errorf("watch %s: not listed within %s: %w", names[i], watchSyncTimeout, err)
		}
	}
	// GetInformer waits for a listing only once the cache has started,
	// which its goroutine may not have yet: a read before then fails
	// ("the cache is not started"), and an agent's first pass with it.
	if !c.WaitForCacheSync(syncCtx) {
		return nil, fmt.Errorf("watch %s: not listed within %s", strings.Join(names, ", "), watchSyncTimeout)
	}
	return c, nil
}

// selection is what opts selects of obj's kind, as the options of one
// List: its namespace (none for a kind without) and field selector.
func selection(direct client.Client, obj client.Object, opts cache.Options) ([]client.ListOption, error) {
	namespaced, err := direct.IsObjectNamespaced(obj)
	if err != nil {
		return nil, err
	}
	namespaces := opts.DefaultNamespaces
	var out []client.ListOption
	for o, by := range opts.ByObject {
		if reflect.TypeOf(o) != reflect.TypeOf(obj) {
			continue
		}
		if by.Namespaces != nil {
			namespaces = by.Namespaces
		}
		if by.Field != nil {
			out = append(out, client.MatchingFieldsSelector{Selector: by.Field})
		}
	}
	for ns := range namespaces {
		if namespaced {
			out = append(out, client.InNamespace(ns))
			break // one suffices to check the watch
		}
	}
	return out, nil
}
