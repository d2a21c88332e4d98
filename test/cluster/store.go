package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
)

// EtcdPrefix is the key prefix kube-apiserver stores every object under
// (its --etcd-prefix).
const EtcdPrefix = "/fenceline"

// StoreEvent is one write etcd recorded under a resource: a version of an
// object, or its deletion.
type StoreEvent struct {
	// Revision is etcd's revision of the write: the resourceVersion of
	// the object version (or of the deletion).
	Revision uint64
	// Seen is when the watch delivered the write.
	Seen time.Time
	// Deleted marks a deletion; Object is then the last stored version.
	Deleted bool
	Object  runtime.Object
}

// StoreWatch streams what etcd recorded under one resource. Unlike an
// informer, whose re-list after a kube-apiserver restart delivers each
// object only at its latest version, it sees every version: etcd keeps
// the history the watch resumes from.
type StoreWatch struct {
	url string // etcd's client URL

	mu  sync.Mutex
	err error
}

// Err returns the first thing the watch could not read (an undecodable
// object, a compacted revision), nil if none: a reader of its events must
// not judge a history with holes.
func (w *StoreWatch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *StoreWatch) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
}

// WatchStore reads the objects stored under resource (the key segment
// after the prefix, such as "minions", "pods" or "<group>/<plural>")
// straight from etcd, bypassing kube-apiserver: it hands fn every stored
// object first, synchronously, then every later write in revision order,
// from a goroutine, until ctx ends. It reconnects from the next revision
// when the stream breaks. decoder decodes the stored bytes (protobuf for
// built-in kinds, JSON for custom resources).
func (c *Cluster) WatchStore(ctx context.Context, resource string, decoder runtime.Decoder, fn func(StoreEvent)) (*StoreWatch, error) {
	w := &StoreWatch{url: c.etcdURL}
	key := []byte(EtcdPrefix + "/" + resource + "/")
	end := prefixEnd(key)
	var page struct {
		Header struct {
			Revision uint64 `json:"revision,string"`
		} `json:"header"`
		KVs []storeKV `json:"kvs"`
	}
	if err := etcdCall(ctx, c.etcdURL+"/v3/kv/range", map[string]any{"key": key, "range_end": end}, &page); err != nil {
		return nil, fmt.Errorf("reading %s from etcd: %w", resource, err)
	}
	for _, kv := range page.KVs {
		obj, err := runtime.Decode(decoder, kv.Value)
		if err != nil {
			return nil, fmt.Errorf("decoding %s from etcd: %w", kv.Key, err)
		}
		fn(StoreEvent{Revision: kv.ModRevision, Seen: time.Now(), Object: obj})
	}
	go w.follow(ctx, key, end, page.Header.Revision+1, decoder, fn)
	return w, nil
}

type storeKV struct {
	Key         []byte `json:"key"`
	ModRevision uint64 `json:"mod_revision,string"`
	Value       []byte `json:"value"`
}

type storeWatchResult struct {
	Result struct {
		CompactRevision uint64 `json:"compact_revision,string"`
		Canceled        bool   `json:"canceled"`
		Events          []struct {
			Type   string  `json:"type"`
			KV     storeKV `json:"kv"`
			PrevKV storeKV `json:"prev_kv"`
		} `json:"events"`
	} `json:"result"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// follow watches from revision next on, through etcd's JSON gateway, and
// starts again from the revision after the last one it delivered whenever
// the stream ends.
func (w *StoreWatch) follow(ctx context.Context, key, end []byte, next uint64, decoder runtime.Decoder, fn func(StoreEvent)) {
	for ctx.Err() == nil {
		var err error
		next, err = w.stream(ctx, key, end, next, decoder, fn)
		if err != nil {
			w.fail(err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stream reads one watch stream and returns the revision to resume from;
// an error is one a retry cannot mend.
func (w *StoreWatch) stream(ctx context.Context, key, end []byte, next uint64, decoder runtime.Decoder, fn func(StoreEvent)) (uint64, error) {
	body, _ := json.Marshal(map[string]any{"create_request": map[string]any{
		"key": key, "range_end": end, "start_revision": next, "prev_kv": true}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url+"/v3/watch", bytes.NewReader(body))
	if err != nil {
		return next, fmt.Errorf("watching etcd: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return next, nil // etcd unreachable for now: try again
	}
	defer func() { _ = resp.Body.Close() }()
	dec := json.NewDecoder(resp.Body)
	for {
		var r storeWatchResult
		if err := dec.Decode(&r); err != nil {
			return next, nil // the stream ended: resume
		}
		if r.Error != nil {
			return next, nil
		}
		if r.Result.CompactRevision != 0 {
			return next, fmt.Errorf("etcd compacted its history to revision %d before the watch read revision %d", r.Result.CompactRevision, next)
		}
		for _, ev := range r.Result.Events {
			deleted := ev.Type == "DELETE"
			stored := ev.KV.Value
			if deleted {
				stored = ev.PrevKV.Value
			}
			obj, err := runtime.Decode(decoder, stored)
			if err != nil {
				return next, fmt.Errorf("decoding %s from etcd at revision %d: %w", ev.KV.Key, ev.KV.ModRevision, err)
			}
			fn(StoreEvent{Revision: ev.KV.ModRevision, Seen: time.Now(), Deleted: deleted, Object: obj})
			next = ev.KV.ModRevision + 1
		}
		if r.Result.Canceled {
			return next, nil
		}
	}
}

// etcdCall posts a request to etcd's JSON gateway and decodes its answer.
func etcdCall(ctx context.Context, url string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd answered %s: %s", resp.Status, bytes.TrimSpace(data))
	}
	return json.Unmarshal(data, out)
}

// prefixEnd is the range end of every key starting with prefix.
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0}
}
