package credential

// Finder is a Store that returns one node's enrolment without listing
// every node: the hub asks for one node on every dispatch to a node that
// never connected to this replica (with several gateway replicas, most
// of them), and a full list costs O(nodes).
type Finder interface {
	// Find returns nodeID's enrolment (enabled or not); ok is false when
	// the store does not know it.
	Find(nodeID string) (n Node, ok bool)
}

// Find returns nodeID's enrolment in s: through s's Finder when it is
// one, else by a scan of s.Nodes().
func Find(s Store, nodeID string) (Node, bool) {
	if f, ok := s.(Finder); ok {
		return f.Find(nodeID)
	}
	for _, n := range s.Nodes() {
		if n.NodeID == nodeID {
			return n, true
		}
	}
	return Node{}, false
}

// Find implements Finder against the most recently loaded version.
func (f *File) Find(nodeID string) (Node, bool) {
	r := f.Load()[nodeID]
	if r == nil {
		return Node{}, false
	}
	return r.Node, true
}

// Find implements Finder: the first store that knows nodeID, as Nodes
// lists it.
func (m Merged) Find(nodeID string) (Node, bool) {
	for _, s := range m {
		if n, ok := Find(s, nodeID); ok {
			return n, true
		}
	}
	return Node{}, false
}

var (
	_ Finder = (*File)(nil)
	_ Finder = Merged(nil)
)
