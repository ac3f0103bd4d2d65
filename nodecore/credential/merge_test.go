package credential

import (
	"errors"
	"testing"
)

type fixed map[string]record

func (f fixed) Authenticate(id string, d Digest) (Node, error) {
	r, ok := f[id]
	if !ok {
		return authenticate(id, nil, d)
	}
	return authenticate(id, &r, d)
}

func (f fixed) Nodes() []Node {
	var out []Node
	for _, r := range f {
		out = append(out, r.Node)
	}
	return out
}

func TestMerged(t *testing.T) {
	a := fixed{nodeA: {Node: Node{NodeID: nodeA, Enabled: true, Pool: "one"}, digest: Sum(secretA)}}
	b := fixed{
		nodeA: {Node: Node{NodeID: nodeA, Enabled: true, Pool: "two"}, digest: Sum(secretB)},
		nodeB: {Node: Node{NodeID: nodeB, Enabled: false}, digest: Sum(secretB)},
	}
	m := Merged{a, b}
	if n, err := m.Authenticate(nodeA, Sum(secretA)); err != nil || n.Pool != "one" {
		t.Fatalf("A: %+v %v", n, err)
	}
	// The first store that knows A decides: B's credential for A is not
	// accepted through the second store.
	if _, err := m.Authenticate(nodeA, Sum(secretB)); !errors.Is(err, ErrMismatch) {
		t.Fatalf("A with the second store's credential: %v", err)
	}
	if _, err := m.Authenticate(nodeB, Sum(secretB)); !errors.Is(err, ErrDisabled) {
		t.Fatalf("B: %v", err)
	}
	if _, err := m.Authenticate("0e000000-0000-4000-8000-00000000000e", Sum(secretA)); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("unknown: %v", err)
	}
	if ns := m.Nodes(); len(ns) != 2 || ns[0].NodeID != nodeB || ns[1].Pool != "one" {
		t.Fatalf("%+v", ns)
	}
}

// lagging is a store whose view lacks a node that Refresh finds.
type lagging struct {
	fixed
	shared    fixed
	refreshes int
}

func (l *lagging) Refresh(id string, d Digest) (Node, error) {
	l.refreshes++
	return l.shared.Authenticate(id, d)
}

// TestMergedRefresh: a node no store's view knows is read through the
// Refresher; a node a view knows costs no refresh.
func TestMergedRefresh(t *testing.T) {
	file := fixed{nodeA: {Node: Node{NodeID: nodeA, Enabled: true}, digest: Sum(secretA)}}
	l := &lagging{fixed: fixed{}, shared: fixed{nodeB: {Node: Node{NodeID: nodeB, Enabled: true, Pool: "new"}, digest: Sum(secretB)}}}
	m := Merged{file, l}
	if _, err := m.Authenticate(nodeA, Sum(secretA)); err != nil || l.refreshes != 0 {
		t.Fatalf("known node: %v, %d refreshes", err, l.refreshes)
	}
	if n, err := m.Authenticate(nodeB, Sum(secretB)); err != nil || n.Pool != "new" || l.refreshes != 1 {
		t.Fatalf("node enrolled elsewhere: %+v %v, %d refreshes", n, err, l.refreshes)
	}
	if _, err := m.Authenticate(nodeB, Sum(secretA)); !errors.Is(err, ErrMismatch) {
		t.Fatalf("wrong credential through the refresh: %v", err)
	}
	if _, err := m.Authenticate("0e000000-0000-4000-8000-00000000000e", Sum(secretA)); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("unknown: %v", err)
	}
}
