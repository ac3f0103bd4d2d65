package credential

import (
	"errors"
	"sort"
)

// Merged is a Store over several stores, consulted in order: the first
// store that knows the node ID authenticates it (so a node ID in the
// operator's file shadows the same ID elsewhere). The gateway merges the
// operator's node credential file with the enrolled-node store.
type Merged []Store

var _ Store = Merged(nil)

// Refresher is a Store whose view follows a store shared by several
// gateway replicas with a delay (a watch). Refresh reads one node from
// the shared store itself, for a node ID its view does not know: a node
// enrolled through another replica a moment ago. Merged calls it only
// when no store knows the node, so known nodes never cost a read;
// implementations bound how often they read. Errors are Authenticate's.
type Refresher interface {
	Store
	// Refresh reads nodeID from the shared store and authenticates it
	// with digest, as Authenticate does.
	Refresh(nodeID string, digest Digest) (Node, error)
}

// Authenticate implements Store: the first store that knows nodeID
// decides. Every store is asked, so the answer takes the same time
// whichever store knows the node. When none does, each Refresher is asked
// to read the node from its shared store; ErrUnknownNode when none has
// it.
func (m Merged) Authenticate(nodeID string, digest Digest) (Node, error) {
	var (
		found  bool
		node   Node
		result error
	)
	for _, s := range m {
		n, err := s.Authenticate(nodeID, digest)
		if found || errors.Is(err, ErrUnknownNode) {
			continue
		}
		found, node, result = true, n, err
	}
	if !found {
		for _, s := range m {
			if r, ok := s.(Refresher); ok {
				if n, err := r.Refresh(nodeID, digest); !errors.Is(err, ErrUnknownNode) {
					return n, err
				}
			}
		}
		return Node{}, unknown(nodeID)
	}
	return node, result
}

// Nodes implements Store: the union, a node ID listed once (from the first
// store that has it), sorted by NodeID.
func (m Merged) Nodes() []Node {
	seen := map[string]bool{}
	var out []Node
	for _, s := range m {
		for _, n := range s.Nodes() {
			if !seen[n.NodeID] {
				seen[n.NodeID] = true
				out = append(out, n)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out
}

func unknown(nodeID string) error {
	_, err := authenticate(nodeID, nil, Digest{})
	return err
}
