package credential

import "testing"

// TestFind: Find answers as Nodes lists: from a File (disabled nodes too),
// from a Merged (the first store that knows the node, as Nodes lists it),
// and from a store that is no Finder through a scan of its Nodes.
func TestFind(t *testing.T) {
	f, _ := open(t, twoNodes(), nil)
	for _, n := range f.Nodes() {
		if got, ok := Find(f, n.NodeID); !ok || got != n {
			t.Fatalf("File: Find(%s) = %+v %v, Nodes has %+v", n.NodeID, got, ok, n)
		}
	}
	const absent = "0e000000-0000-4000-8000-00000000000e"
	if _, ok := Find(f, absent); ok {
		t.Fatal("File: an unknown node was found")
	}
	scan := fixed{nodeA: {Node: Node{NodeID: nodeA, Enabled: true, Pool: "scanned"}, digest: Sum(secretA)}}
	if n, ok := Find(scan, nodeA); !ok || n.Pool != "scanned" {
		t.Fatalf("a store without Find: %+v %v", n, ok)
	}
	if _, ok := Find(scan, absent); ok {
		t.Fatal("a store without Find: an unknown node was found")
	}
	m := Merged{scan, f}
	for _, n := range m.Nodes() {
		if got, ok := Find(m, n.NodeID); !ok || got != n {
			t.Fatalf("Merged: Find(%s) = %+v %v, Nodes has %+v", n.NodeID, got, ok, n)
		}
	}
	if n, _ := Find(m, nodeA); n.Pool != "scanned" {
		t.Fatalf("Merged: the first store must shadow the second: %+v", n)
	}
	if _, ok := Find(m, absent); ok {
		t.Fatal("Merged: an unknown node was found")
	}
}
