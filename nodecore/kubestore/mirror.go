package kubestore

import (
	"strconv"
	"sync"
	"time"
)

// mirror is a replica's view of one kind of object: name → value, each
// with the resourceVersion it was read or written at. It is fed by the
// watch and by this replica's own writes, in whatever order they arrive:
// a value older than the one held is ignored, and a removal leaves a
// tombstone for a while so that a late event from before it does not
// bring the object back. Kubernetes resourceVersions are decimal integers
// that grow with every write (comparable since Kubernetes 1.35); a value
// whose version does not parse is always taken.
type mirror[V any] struct {
	mu    sync.Mutex
	items map[string]versioned[V]
	gone  map[string]tombstone
	now   func() time.Time
}

type versioned[V any] struct {
	v  V
	rv uint64 // 0: unknown
}

type tombstone struct {
	rv uint64
	at time.Time
}

// tombstoneTTL is how long a removal masks older events; maxTombstones
// bounds them (past it, the expired ones are swept).
const (
	tombstoneTTL  = time.Minute
	maxTombstones = 4096
)

func newMirror[V any]() *mirror[V] {
	return &mirror[V]{items: map[string]versioned[V]{}, gone: map[string]tombstone{}, now: time.Now}
}

func parseRV(rv string) uint64 {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// put installs v at version rv unless a newer value or removal is held;
// it reports whether v was installed.
func (m *mirror[V]) put(name, rv string, v V) bool {
	n := parseRV(rv)
	m.mu.Lock()
	defer m.mu.Unlock()
	if n != 0 {
		if cur, ok := m.items[name]; ok && cur.rv != 0 && cur.rv >= n {
			return false
		}
		if t, ok := m.gone[name]; ok && t.rv != 0 && t.rv >= n {
			return false
		}
	}
	delete(m.gone, name)
	m.items[name] = versioned[V]{v: v, rv: n}
	return true
}

// remove forgets name if the held value is not newer than rv ("": any),
// and masks older values for a while.
func (m *mirror[V]) remove(name, rv string) {
	n := parseRV(rv)
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.items[name]
	if ok && n != 0 && cur.rv > n {
		return
	}
	if ok && n == 0 {
		n = cur.rv
	}
	delete(m.items, name)
	if len(m.gone) >= maxTombstones {
		now := m.now()
		for k, t := range m.gone {
			if now.Sub(t.at) > tombstoneTTL {
				delete(m.gone, k)
			}
		}
	}
	if len(m.gone) < maxTombstones {
		m.gone[name] = tombstone{rv: n, at: m.now()}
	}
}

// get returns name's value and version.
func (m *mirror[V]) get(name string) (V, string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	it, ok := m.items[name]
	if !ok {
		var zero V
		return zero, "", false
	}
	rv := ""
	if it.rv != 0 {
		rv = strconv.FormatUint(it.rv, 10)
	}
	return it.v, rv, true
}

// values returns every value (in no order).
func (m *mirror[V]) values() []V {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]V, 0, len(m.items))
	for _, it := range m.items {
		out = append(out, it.v)
	}
	return out
}
