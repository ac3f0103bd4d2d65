package egress

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/sandgate/sandgate/corectl/cidr"
	"github.com/sandgate/sandgate/corectl/cluster"
	networkingv1 "k8s.io/api/networking/v1"
)

// Allowlist is an egress allowlist with carve-outs: every address of the
// CIDRs of Allow, all protocols and ports, except the addresses of the
// CIDRs of Except. It is E2B's denyOut (and allow_internet_access: false)
// expressed in the policy: each ipBlock of Allow carries, as its
// ipBlock.except, the Except CIDRs that lie strictly inside it. Carve
// returns an Allowlist in its normal form (the only form Compile takes and
// DecompileExcept returns): Allow and Except normalised sets (cidr.Compare
// order, deduplicated), no Allow CIDR inside an Except CIDR (it would
// allow nothing), every Except CIDR strictly inside at least one Allow
// CIDR (Kubernetes refuses an except that is not) and inside no other
// Except CIDR.
type Allowlist struct {
	// Allow is the allowed CIDRs.
	Allow []netip.Prefix
	// Except is the carved-out CIDRs.
	Except []netip.Prefix
}

// Carve returns allow minus deny in the Allowlist normal form: an allow
// CIDR inside (or equal to) a deny CIDR is dropped, a deny CIDR strictly
// inside an allow CIDR becomes an except, and a deny CIDR that overlaps no
// allow CIDR changes nothing (CIDRs either nest or are disjoint). allow
// and deny must be normalised sets (cidr.NormalizePrefixes); the result
// shares no memory with them.
func Carve(allow, deny []netip.Prefix) Allowlist {
	out := Allowlist{Allow: []netip.Prefix{}, Except: []netip.Prefix{}}
	for _, a := range allow {
		if !slices.ContainsFunc(deny, func(d netip.Prefix) bool { return cidr.Covers(d, a) }) {
			out.Allow = append(out.Allow, a)
		}
	}
	for _, d := range deny {
		inside := slices.ContainsFunc(out.Allow, func(a netip.Prefix) bool { return strictlyInside(a, d) })
		nested := slices.ContainsFunc(deny, func(o netip.Prefix) bool { return o != d && cidr.Covers(o, d) })
		if inside && !nested {
			out.Except = append(out.Except, d)
		}
	}
	return out
}

// strictlyInside reports whether inner is a proper subset of outer.
func strictlyInside(outer, inner netip.Prefix) bool {
	return outer.Bits() < inner.Bits() && outer.Contains(inner.Addr())
}

// exceptsInside returns the CIDRs of except strictly inside block, in
// order (nil when none).
func exceptsInside(block netip.Prefix, except []netip.Prefix) []string {
	var out []string
	for _, e := range except {
		if strictlyInside(block, e) {
			out = append(out, e.String())
		}
	}
	return out
}

// CompileExcept is Compile for an Allowlist in its normal form (Carve):
// each ipBlock's except lists the Except CIDRs strictly inside its CIDR,
// in set order.
func CompileExcept(c *cluster.Cluster, allocationLabel, allocationID string, list Allowlist) networkingv1.NetworkPolicySpec {
	spec := Compile(c, allocationLabel, allocationID, cidr.Strings(list.Allow))
	for i, a := range list.Allow {
		if ex := exceptsInside(a, list.Except); len(ex) > 0 {
			spec.Egress[i+1].To[0].IPBlock.Except = ex
		}
	}
	return spec
}

// DecompileExcept returns the Allowlist of a spec in the shape
// CompileExcept produces: Decompile's shape, except that an ipBlock may
// carry an except list, which must be a normalised set of CIDRs strictly
// inside its CIDR and exactly the carve-outs CompileExcept would write for
// the union of all blocks' excepts (so the result is in normal form). The
// sets are returned as strings (normalised). Anything else is
// errUndecodable.
func DecompileExcept(spec *networkingv1.NetworkPolicySpec) (set, except []string, err error) {
	blocks := make([][]string, 0, len(spec.Egress))
	stripped := spec.DeepCopy()
	for i := range stripped.Egress {
		if i == 0 {
			continue
		}
		r := &stripped.Egress[i]
		if len(r.To) == 1 && r.To[0].IPBlock != nil {
			blocks = append(blocks, r.To[0].IPBlock.Except)
			r.To[0].IPBlock.Except = nil
		} else {
			blocks = append(blocks, nil)
		}
	}
	set, err = Decompile(stripped)
	if err != nil {
		return nil, nil, err
	}
	var all []string
	for _, b := range blocks {
		if !cidr.IsNormalized(b) {
			return nil, nil, fmt.Errorf("%w: an ipBlock's except is not a normalised set", errUndecodable)
		}
		all = append(all, b...)
	}
	allP, err := cidr.NormalizePrefixes(all)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: except: %s", errUndecodable, err.Error())
	}
	setP, err := cidr.NormalizePrefixes(set)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s", errUndecodable, err.Error())
	}
	if canon := Carve(setP, allP); !slices.Equal(canon.Allow, setP) || !slices.Equal(canon.Except, allP) {
		return nil, nil, fmt.Errorf("%w: the ipBlocks and their excepts are not in normal form", errUndecodable)
	}
	for i, a := range setP {
		if !slices.Equal(blocks[i], exceptsInside(a, allP)) {
			return nil, nil, fmt.Errorf("%w: egress[%d]'s except is not the carve-outs inside its CIDR", errUndecodable, i+1)
		}
	}
	return set, cidr.Strings(allP), nil
}

// Subtract returns the addresses of list as plain CIDRs: each Allow CIDR
// minus the Except CIDRs inside it, split into the CIDRs that cover
// exactly the rest (at most 32 per except). The conflict check compares
// other policies' ipBlocks against this set, so a policy that re-allows a
// carved-out range is a conflict.
func Subtract(list Allowlist) []netip.Prefix {
	var out []netip.Prefix
	var walk func(p netip.Prefix)
	walk = func(p netip.Prefix) {
		overlaps := false
		for _, e := range list.Except {
			if cidr.Covers(e, p) {
				return
			}
			if strictlyInside(p, e) {
				overlaps = true
			}
		}
		if !overlaps {
			out = append(out, p)
			return
		}
		lo := netip.PrefixFrom(p.Addr(), p.Bits()+1)
		b := p.Addr().As4()
		idx := p.Bits() / 8
		b[idx] |= 0x80 >> (p.Bits() % 8)
		hi := netip.PrefixFrom(netip.AddrFrom4(b), p.Bits()+1)
		walk(lo)
		walk(hi)
	}
	for _, a := range list.Allow {
		walk(a)
	}
	slices.SortFunc(out, cidr.Compare)
	return slices.Compact(out)
}

// allowlistOf parses a normalised set and except (strings, as Decompile
// and DecompileExcept return them) back into an Allowlist; both were
// checked, so a parse error means a bug and is returned.
func allowlistOf(set, except []string) (Allowlist, error) {
	a, err := cidr.NormalizePrefixes(set)
	if err != nil {
		return Allowlist{}, err
	}
	e, err := cidr.NormalizePrefixes(except)
	if err != nil {
		return Allowlist{}, err
	}
	return Allowlist{Allow: a, Except: e}, nil
}
