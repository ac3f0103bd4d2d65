// Package wire holds corectl's request bodies, the E2B shapes (NewSandbox
// and its network object, the lifetime bodies) and sandgate's own (the
// egress and ingress allowlist PUTs, a template's network defaults), with
// one strict decoder per shape. Every decoder follows internal/strictjson's
// rules for request bodies (strictjson.Check: one well-formed value, valid
// UTF-8, no duplicate keys, bounded nesting; its errors keep their classes
// and never quote the body). The object bodies are read through the one
// walk here (members, and rules for the allowlists' rule arrays); what
// each shape then refuses (unknown members, nulls, wrong types, missing
// members) and the words of its errors are the shape's, as each route has
// answered before; the create's network object, whose unknown members are
// ignored, is decoded into its struct after strictjson.CheckFold. Decoders
// return typed values: normalised prefix sets (netip.Prefix) and the API's
// rule types (v1alpha1), which the engines take as they are.
package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cidr"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/internal/strictjson"
)

// The error classes of the sandgate PUT bodies; each route answers 400
// bad_request with the error's text, which starts with the class's.
var (
	// ErrEgressBadRequest: the PUT /sandboxes/{id}/network body is not the
	// rule model of spec §3.1.1 I.
	ErrEgressBadRequest = errors.New("egress: bad request")
	// ErrIngressBadRequest: the PUT /sandboxes/{id}/network/ingress body is
	// not a non-empty ingress allowlist.
	ErrIngressBadRequest = errors.New("ingressallow: bad request")
	// ErrTemplateBadRequest: the PUT /sandbox-templates/{id}/network body
	// is not a template network object.
	ErrTemplateBadRequest = errors.New("template: bad request")
)

// Size bounds of the sandgate PUT bodies, in bytes: a body over its
// bound is refused before it is parsed.
const (
	// MaxEgressPutSize bounds PUT /sandboxes/{id}/network (64 KiB).
	MaxEgressPutSize = 64 << 10
	// MaxIngressPutSize bounds PUT /sandboxes/{id}/network/ingress
	// (128 KiB).
	MaxIngressPutSize = 128 << 10
	// MaxTemplateNetworkSize bounds PUT /sandbox-templates/{id}/network
	// and the resolve route's body (256 KiB).
	MaxTemplateNetworkSize = 256 << 10
)

// errNotObject is members' error for a well-formed value that is not a
// JSON object (null included).
var errNotObject = errors.New("not a JSON object")

// members is the one strict walk of a body's top level: data must pass
// strictjson.Check (its error is returned as is) and be a JSON object
// (else errNotObject); it returns the object's members, each value as
// written.
func members(data []byte) (map[string]json.RawMessage, error) {
	if err := strictjson.Check(data); err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil || m == nil {
		return nil, errNotObject
	}
	return m, nil
}

// isNull reports whether a member's value is JSON null.
func isNull(v json.RawMessage) bool { return string(v) == "null" }

// rules decodes v, the value of member field: a JSON array of objects
// with the member cidr (a string, required) and, when withDescription,
// description (a string of at most ingressallow.MaxDescription bytes);
// null, unknown members and wrong types are refused. The rules are
// returned as written (not normalised). Error texts name field[i].
func rules(v json.RawMessage, field string, withDescription bool) ([]v1alpha1.IngressRule, error) {
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(v, &items); err != nil || items == nil {
		return nil, fmt.Errorf("%s must be an array of objects", field)
	}
	out := make([]v1alpha1.IngressRule, len(items))
	for i, it := range items {
		if it == nil {
			return nil, fmt.Errorf("%s[%d] must be an object", field, i)
		}
		for k, val := range it {
			switch {
			case k == "cidr":
				if isNull(val) || json.Unmarshal(val, &out[i].CIDR) != nil {
					return nil, fmt.Errorf("%s[%d].cidr must be a string", field, i)
				}
			case k == "description" && withDescription:
				if isNull(val) || json.Unmarshal(val, &out[i].Description) != nil {
					return nil, fmt.Errorf("%s[%d].description must be a string", field, i)
				}
				if len(out[i].Description) > ingressallow.MaxDescription {
					return nil, fmt.Errorf("%s[%d].description is longer than %d bytes", field, i, ingressallow.MaxDescription)
				}
			default:
				return nil, fmt.Errorf("%s[%d]: unknown field %q", field, i, k)
			}
		}
		if _, ok := it["cidr"]; !ok {
			return nil, fmt.Errorf("%s[%d]: missing field cidr", field, i)
		}
	}
	return out, nil
}

// cidrError is a normalisation error of the CIDRs of member field: it
// names the entry (field[i].cidr) when cidr says which, and wraps err.
func cidrError(field string, err error) error {
	var ee *cidr.EntryError
	if errors.As(err, &ee) {
		return fmt.Errorf("%s[%d].cidr: %w", field, ee.Index, err)
	}
	return fmt.Errorf("%s: %w", field, err)
}

// egressSet decodes v, the value of member field, as egress rules
// ({cidr} objects) and returns the normalised set (cidr.NormalizePrefixes).
func egressSet(v json.RawMessage, field string) ([]netip.Prefix, error) {
	rs, err := rules(v, field, false)
	if err != nil {
		return nil, err
	}
	list := make([]string, len(rs))
	for i, r := range rs {
		list[i] = r.CIDR
	}
	set, err := cidr.NormalizePrefixes(list)
	if err != nil {
		return nil, cidrError(field, err)
	}
	return set, nil
}

// ingressRules decodes v, the value of member field, as ingress rules
// ({cidr, description?} objects) and returns them normalised
// (ingressallow.NormalizeRules).
func ingressRules(v json.RawMessage, field string) ([]v1alpha1.IngressRule, error) {
	rs, err := rules(v, field, true)
	if err != nil {
		return nil, err
	}
	out, err := ingressallow.NormalizeRules(rs)
	if err != nil {
		return nil, cidrError(field, err)
	}
	return out, nil
}

// EgressPut is the PUT /sandboxes/{id}/network body (spec §3.1.1 I):
// {"defaultAction": "deny", "egress": [{"cidr": "..."}, ...]}, the
// complete egress allowlist (full replacement).
type EgressPut struct {
	// DefaultAction must be "deny".
	DefaultAction string `json:"defaultAction"`
	// Egress is the allowlist: destination CIDRs, all protocols and ports.
	Egress []v1alpha1.EgressRule `json:"egress"`
}

// DecodeEgressPut decodes an EgressPut body strictly and returns its
// normalised set (cidr.NormalizePrefixes: masked, sorted, deduplicated;
// possibly empty: deny all), which egress.Engine.Put takes. Both
// members are required and neither may be null; any other member, a
// rule member other than cidr, a wrong type, or a CIDR with host bits set
// (cidr.CheckNormalized: refused, not rewritten) is refused. Errors wrap
// ErrEgressBadRequest, and strictjson's class or cidr.ErrInvalid (with
// cidr.ErrNotNormalized for host bits) / cidr.ErrTooMany (naming
// egress[i]) where there is one.
func DecodeEgressPut(body []byte) ([]netip.Prefix, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %w", ErrEgressBadRequest, fmt.Errorf(format, args...))
	}
	if len(body) > MaxEgressPutSize {
		return nil, bad("body larger than %d bytes", MaxEgressPutSize)
	}
	raw, err := members(body)
	if errors.Is(err, errNotObject) {
		return nil, bad("body must be a JSON object")
	}
	if err != nil {
		return nil, bad("%w", err)
	}
	for k, v := range raw {
		if k != "defaultAction" && k != "egress" {
			return nil, bad("unknown field %q (only defaultAction and egress[].cidr)", k)
		}
		if isNull(v) {
			return nil, bad("field %s is null", k)
		}
	}
	for _, k := range []string{"defaultAction", "egress"} {
		if _, ok := raw[k]; !ok {
			return nil, bad("missing field %s", k)
		}
	}
	var action string
	if err := json.Unmarshal(raw["defaultAction"], &action); err != nil {
		return nil, bad("defaultAction must be a string")
	}
	if action != "deny" {
		return nil, bad("defaultAction must be \"deny\"")
	}
	rs, err := rules(raw["egress"], "egress", false)
	if err != nil {
		return nil, bad("%w", err)
	}
	// The PUT takes normalised CIDRs only (spec §3.1.1 I): an entry whose
	// host bits are set is refused, not rewritten into another network.
	for i, r := range rs {
		if err := cidr.CheckNormalized(r.CIDR); err != nil {
			return nil, bad("egress[%d].cidr: %w", i, err)
		}
	}
	set, err := egressSet(raw["egress"], "egress")
	if err != nil {
		return nil, bad("%w", err)
	}
	return set, nil
}

// IngressPut is the PUT /sandboxes/{id}/network/ingress body:
// {"ingress": [{"cidr": "...", "description": "..."}, ...]}, the complete
// ingress allowlist (full replacement, never empty).
type IngressPut struct {
	// Ingress is the allowlist.
	Ingress []v1alpha1.IngressRule `json:"ingress"`
}

// DecodeIngressPut decodes an IngressPut body strictly and returns its
// rules normalised (ingressallow.NormalizeRules: CIDRs normalised, sorted,
// entries of one CIDR merged keeping the first non-empty description).
// ingress is required and must not be empty (spec §5.2.1: an empty PUT
// would clear the allowlist); unknown members, nulls and wrong types are
// refused. Errors wrap ErrIngressBadRequest, and strictjson's class or
// cidr.ErrInvalid / cidr.ErrTooMany (naming ingress[i]) where there is
// one.
func DecodeIngressPut(body []byte) ([]v1alpha1.IngressRule, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %w", ErrIngressBadRequest, fmt.Errorf(format, args...))
	}
	if len(body) > MaxIngressPutSize {
		return nil, bad("body larger than %d bytes", MaxIngressPutSize)
	}
	raw, err := members(body)
	if errors.Is(err, errNotObject) {
		return nil, bad("body must be a JSON object")
	}
	if err != nil {
		return nil, bad("%w", err)
	}
	for k := range raw {
		if k != "ingress" {
			return nil, bad("unknown field %q (only ingress)", k)
		}
	}
	v, ok := raw["ingress"]
	if !ok {
		return nil, bad("missing field ingress")
	}
	rs, err := ingressRules(v, "ingress")
	if err != nil {
		return nil, bad("%w", err)
	}
	if len(rs) == 0 {
		return nil, bad("ingress must not be empty (an empty list would clear the allowlist)")
	}
	return rs, nil
}

// TemplateNetwork is the PUT /sandbox-templates/{id}/network body:
// {"ingress": [{"cidr", "description"?}], "egress": [{"cidr"}]}, the
// template's default allowlists (full replacement; an absent list is
// empty).
type TemplateNetwork struct {
	// Ingress is the default ingress allowlist (normalised, never nil).
	Ingress []v1alpha1.IngressRule `json:"ingress"`
	// Egress is the default egress allowlist (normalised, never nil).
	Egress []v1alpha1.EgressRule `json:"egress"`
}

// DecodeTemplateNetwork decodes a TemplateNetwork body strictly: unknown
// members, nulls and wrong types are refused; an absent list is empty.
// CIDRs are normalised. Errors wrap ErrTemplateBadRequest, and
// strictjson's class or cidr.ErrInvalid / cidr.ErrTooMany (naming
// ingress[i] or egress[i]) where there is one.
func DecodeTemplateNetwork(body []byte) (TemplateNetwork, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %w", ErrTemplateBadRequest, fmt.Errorf(format, args...))
	}
	if len(body) > MaxTemplateNetworkSize {
		return TemplateNetwork{}, bad("body larger than %d bytes", MaxTemplateNetworkSize)
	}
	raw, err := members(body)
	if errors.Is(err, errNotObject) {
		return TemplateNetwork{}, bad("body must be a JSON object")
	}
	if err != nil {
		return TemplateNetwork{}, bad("%w", err)
	}
	n := TemplateNetwork{Ingress: []v1alpha1.IngressRule{}, Egress: []v1alpha1.EgressRule{}}
	for k, v := range raw {
		switch k {
		case "ingress":
			rs, err := ingressRules(v, "ingress")
			if err != nil {
				return TemplateNetwork{}, bad("%w", err)
			}
			n.Ingress = rs
		case "egress":
			set, err := egressSet(v, "egress")
			if err != nil {
				return TemplateNetwork{}, bad("%w", err)
			}
			for _, p := range set {
				n.Egress = append(n.Egress, v1alpha1.EgressRule{CIDR: p.String()})
			}
		default:
			return TemplateNetwork{}, bad("unknown field %q (only ingress and egress)", k)
		}
	}
	return n, nil
}

// NewSandbox is E2B's NewSandbox body (POST /sandboxes) as corectl reads
// it. Every member of E2B's NewSandbox is either honoured (templateID,
// timeout, metadata, envVars, allow_internet_access, network), accepted
// because it changes nothing for the user (secure: sandgate always
// requires the envd access token; autoPause false, autoResume disabled,
// lifecycle onTimeout "kill", empty volumeMounts, null mcp: the defaults)
// or refused by DecodeNewSandbox with an *UnsupportedError. Members E2B's
// NewSandbox does not define are ignored.
type NewSandbox struct {
	// TemplateID is the template ("": not given).
	TemplateID string `json:"templateID"`
	// Network is the network object as written (nil: not given);
	// DecodeNetwork decodes it.
	Network json.RawMessage `json:"network"`
	// Timeout is the time to live; TimeoutGiven says whether the body
	// had it (0 given is for the caller to refuse).
	Timeout      time.Duration `json:"-"`
	TimeoutGiven bool          `json:"-"`
	// Metadata and EnvVars are E2B's metadata and envVars (nil: not
	// given or null).
	Metadata map[string]string `json:"metadata"`
	EnvVars  map[string]string `json:"envVars"`
	// AllowInternetAccess is E2B's allow_internet_access (nil: not given
	// or null). false behaves as network.denyOut ["0.0.0.0/0"] (E2B's
	// definition): the sandbox reaches only the platform DNS and what
	// allowOut allows.
	AllowInternetAccess *bool `json:"-"`
}

// UnsupportedError is DecodeNewSandbox's and DecodeNetwork's refusal of a
// member sandgate cannot honour: the create answers 400 bad_request with
// its text and writes nothing.
type UnsupportedError struct {
	// Field is the member's path as E2B's API spells it ("autoPause",
	// "network.allowOut[2]").
	Field string
	// Why says what sandgate cannot do.
	Why string
}

// Error implements error: "<field>: not supported: <why>".
func (e *UnsupportedError) Error() string { return e.Field + ": not supported: " + e.Why }

// errNewSandboxShape is DecodeNewSandbox's error for a body that is not
// an object or has a templateID that is not a string.
var errNewSandboxShape = errors.New("the body is not a JSON object of the right shape")

// DecodeNewSandbox decodes a create body: an empty body is an empty
// create; otherwise a JSON object (null refused, as E2B's API validates
// the body as an object) whose templateID is a string, timeout a whole
// number of seconds (Seconds' rule), metadata and envVars objects of
// strings (absent or null: nil), allow_internet_access a boolean. Members
// are matched exactly, so a case variant such as "Network" is an ignored
// unknown member, not a second value. Errors: "the body is invalid JSON:
// ..." (strictjson's class), "the body is not a JSON object of the right
// shape", the timeout's, "<member> must be an object of strings",
// "<member> must be a boolean", and *UnsupportedError for a member
// sandgate cannot honour (see checkUnsupported). The caller checks the
// values' limits.
func DecodeNewSandbox(body []byte) (NewSandbox, error) {
	var req NewSandbox
	if len(body) == 0 {
		return req, nil
	}
	top, err := members(body)
	if errors.Is(err, errNotObject) {
		return req, errNewSandboxShape
	}
	if err != nil {
		return req, fmt.Errorf("the body is %w", err) // "the body is invalid JSON: ..."
	}
	if v, ok := top["templateID"]; ok {
		if err := json.Unmarshal(v, &req.TemplateID); err != nil {
			return req, errNewSandboxShape
		}
	}
	req.Network = top["network"]
	if req.Timeout, req.TimeoutGiven, err = seconds(top, "timeout"); err != nil {
		return req, err
	}
	if req.Metadata, err = stringMap(top, "metadata"); err != nil {
		return req, err
	}
	if req.EnvVars, err = stringMap(top, "envVars"); err != nil {
		return req, err
	}
	if req.AllowInternetAccess, err = optBool(top, "allow_internet_access"); err != nil {
		return req, err
	}
	if err := checkUnsupported(top); err != nil {
		return req, err
	}
	return req, nil
}

// optBool reads member name of obj as a boolean (absent or null: nil).
func optBool(obj map[string]json.RawMessage, name string) (*bool, error) {
	raw, ok := obj[name]
	if !ok || isNull(raw) {
		return nil, nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, fmt.Errorf("%s must be a boolean", name)
	}
	return &b, nil
}

// Why sandgate cannot honour a NewSandbox member (UnsupportedError.Why).
const (
	whyPause   = "sandgate cannot pause a sandbox (OpenSandbox keeps no process state); a sandbox ends at its timeout"
	whyVolumes = "sandgate has no volumes"
	whyMCP     = "sandgate runs no MCP gateway in the sandbox"
)

// checkUnsupported refuses the NewSandbox members whose value asks for
// something sandgate cannot do, in a fixed order so one body always gets
// the same answer: autoPause true, autoResume.enabled true, lifecycle
// onTimeout "pause" or autoResume true, a non-empty volumeMounts, a
// non-null mcp, and allowInternetAccess (camelCase: E2B's member is
// allow_internet_access, and a misspelt security setting must not pass
// unnoticed). A member of the wrong type is refused too. The defaults
// (false, {"enabled": false}, "kill", [], null) and secure (any boolean:
// sandgate always requires the access token) are accepted.
func checkUnsupported(top map[string]json.RawMessage) error {
	if b, err := optBool(top, "autoPause"); err != nil {
		return err
	} else if b != nil && *b {
		return &UnsupportedError{Field: "autoPause", Why: whyPause}
	}
	if _, err := optBool(top, "secure"); err != nil {
		return err
	}
	if raw, ok := top["autoResume"]; ok && !isNull(raw) {
		var ar struct {
			Enabled *bool `json:"enabled"`
		}
		if err := json.Unmarshal(raw, &ar); err != nil {
			return errors.New("autoResume must be an object {enabled: boolean}")
		}
		if ar.Enabled != nil && *ar.Enabled {
			return &UnsupportedError{Field: "autoResume.enabled", Why: whyPause}
		}
	}
	if raw, ok := top["lifecycle"]; ok && !isNull(raw) {
		var lc struct {
			OnTimeout  *string `json:"onTimeout"`
			AutoResume *bool   `json:"autoResume"`
		}
		if err := json.Unmarshal(raw, &lc); err != nil {
			return errors.New("lifecycle must be an object {onTimeout: string, autoResume: boolean}")
		}
		if lc.OnTimeout != nil && *lc.OnTimeout != "kill" {
			if *lc.OnTimeout == "pause" {
				return &UnsupportedError{Field: "lifecycle.onTimeout", Why: whyPause}
			}
			return errors.New(`lifecycle.onTimeout must be "kill" or "pause"`)
		}
		if lc.AutoResume != nil && *lc.AutoResume {
			return &UnsupportedError{Field: "lifecycle.autoResume", Why: whyPause}
		}
	}
	if raw, ok := top["volumeMounts"]; ok && !isNull(raw) {
		var vm []json.RawMessage
		if err := json.Unmarshal(raw, &vm); err != nil {
			return errors.New("volumeMounts must be an array")
		}
		if len(vm) > 0 {
			return &UnsupportedError{Field: "volumeMounts", Why: whyVolumes}
		}
	}
	if raw, ok := top["mcp"]; ok && !isNull(raw) {
		return &UnsupportedError{Field: "mcp", Why: whyMCP}
	}
	if _, ok := top["allowInternetAccess"]; ok {
		return &UnsupportedError{Field: "allowInternetAccess", Why: "E2B's NewSandbox member is allow_internet_access"}
	}
	return nil
}

// stringMap reads member name of obj as a JSON object of strings (E2B's
// SandboxMetadata and EnvVars); absent or null is nil.
func stringMap(obj map[string]json.RawMessage, name string) (map[string]string, error) {
	raw, ok := obj[name]
	if !ok || isNull(raw) {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%s must be an object of strings", name)
	}
	return m, nil
}

// errLifetimeShape is Seconds' error for a body that is not an object.
var errLifetimeShape = errors.New("the body is not a JSON object")

// Seconds decodes the body of a lifetime route, one member name of whole
// seconds: E2B's SandboxTimeoutRequest ({"timeout": n}), RefreshRequest
// ({"duration": n}) and ConnectSandbox ({"timeout": n}); other members
// are ignored. An empty body is an empty object. The value must be an
// integer in [0, 2^31-1] (E2B's int32 with minimum 0); given is false
// when the member is absent. Errors: "the body is invalid JSON: ..."
// (strictjson's class), "the body is not a JSON object", "<name> must be
// a whole number of seconds from 0 to 2147483647".
func Seconds(body []byte, name string) (d time.Duration, given bool, err error) {
	if len(body) == 0 {
		return 0, false, nil
	}
	obj, err := members(body)
	if errors.Is(err, errNotObject) {
		return 0, false, errLifetimeShape
	}
	if err != nil {
		return 0, false, fmt.Errorf("the body is %w", err)
	}
	return seconds(obj, name)
}

// seconds reads member name of obj as whole seconds (Seconds' rule).
func seconds(obj map[string]json.RawMessage, name string) (d time.Duration, given bool, err error) {
	raw, ok := obj[name]
	if !ok {
		return 0, false, nil
	}
	n, perr := strconv.ParseInt(string(raw), 10, 64)
	if perr != nil || n < 0 || n > math.MaxInt32 {
		return 0, true, fmt.Errorf("%s must be a whole number of seconds from 0 to %d", name, math.MaxInt32)
	}
	return time.Duration(n) * time.Second, true, nil
}

// Network is the create request's network object (E2B's
// SandboxNetworkConfig with sandgate's extensions, spec §3.1.1 II).
// DecodeNetwork refuses what sandgate cannot honour (a non-empty
// maskRequestHost, rules, egressProxy or httpsPorts) with an
// *UnsupportedError; other members not listed here are ignored, as the
// JSON binding of the reference implementation drops them. Domain names
// in AllowOut and DenyOut are refused when the network is resolved
// (package createnet), where the CIDRs are parsed.
type Network struct {
	// AllowPublicTraffic changes no egress: it is about who may reach the
	// sandbox's URLs, not about what the sandbox may reach. False makes
	// the sandbox's ports need its traffic access token (package
	// lifecycle, AnnotationTrafficToken); true or absent leaves them open.
	AllowPublicTraffic *bool `json:"allowPublicTraffic"`
	// AllowOut is the official SDK's egress allowlist; it wins over
	// DenyOut (E2B: "allowed entries always take precedence").
	AllowOut []string `json:"allowOut"`
	// DenyOut is E2B's list of denied CIDRs: carved out of the allowed
	// set (the policy's ipBlock.except).
	DenyOut []string `json:"denyOut"`
	// Ingress is the extension ingress allowlist.
	Ingress []IngressEntry `json:"ingress"`
	// Egress is the native egress allowlist; it wins over AllowOut.
	Egress []EgressEntry `json:"egress"`
	// MaskRequestHost, Rules and EgressProxy are E2B members sandgate
	// cannot honour: DecodeNetwork refuses them unless empty or null.
	MaskRequestHost *string                    `json:"maskRequestHost"`
	Rules           map[string]json.RawMessage `json:"rules"`
	EgressProxy     json.RawMessage            `json:"egressProxy"`
	// HTTPSPorts is E2B's list of the sandbox's ports that serve HTTPS
	// (JS SDK 2.51's network.httpsPorts), which its proxy reaches over
	// TLS: DecodeNetwork refuses it unless empty or null, since sandgate
	// reaches a sandbox's ports over plain HTTP only.
	HTTPSPorts []json.RawMessage `json:"httpsPorts"`
}

// IngressEntry is one ingress entry of a Network.
type IngressEntry struct {
	// CIDR is an IPv4 address or CIDR.
	CIDR string `json:"cidr"`
	// Description is free text (at most ingressallow.MaxDescription bytes,
	// checked when the network is resolved).
	Description string `json:"description"`
}

// EgressEntry is one native egress entry of a Network.
type EgressEntry struct {
	// CIDR is an IPv4 address or CIDR.
	CIDR string `json:"cidr"`
}

// NetworkError is DecodeNetwork's refusal: the create answers it with 400
// bad_request and Message.
type NetworkError struct {
	// Message says what is wrong, never quoting a value: "network:
	// invalid JSON: ...", "network.<member> has the wrong type", "network
	// must be a JSON object".
	Message string
	// Err is strictjson's error when the object broke one of its rules
	// (its class: ErrMalformed, ErrDuplicateMember, ErrTooDeep); nil
	// otherwise.
	Err error
}

// Error implements error: Message.
func (e *NetworkError) Error() string { return e.Message }

// Unwrap returns Err.
func (e *NetworkError) Unwrap() error { return e.Err }

// DecodeNetwork decodes a create request's network object. Empty input or
// JSON null means "not passed" (nil, nil). Unknown members are ignored
// and the members sandgate cannot honour refused (Network's doc;
// *UnsupportedError);
// strictjson.CheckFold's rules apply (a duplicate key, also two keys
// equal under case folding, since encoding/json matches fields
// case-insensitively and would keep the last), and a member of the wrong
// JSON type or a value that is not an object is refused. Errors are
// *NetworkError.
func DecodeNetwork(raw []byte) (*Network, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || isNull(raw) {
		return nil, nil
	}
	if err := strictjson.CheckFold(raw); err != nil {
		return nil, &NetworkError{Message: "network: " + err.Error(), Err: err}
	}
	var n Network
	if err := json.Unmarshal(raw, &n); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" { // "": the network value itself
			return nil, &NetworkError{Message: fmt.Sprintf("network.%s has the wrong type", te.Field)}
		}
		return nil, &NetworkError{Message: "network must be a JSON object"}
	}
	switch {
	case n.MaskRequestHost != nil && *n.MaskRequestHost != "":
		return nil, &UnsupportedError{Field: "network.maskRequestHost", Why: "sandgate does not rewrite the Host of requests to the sandbox"}
	case len(n.Rules) > 0:
		return nil, &UnsupportedError{Field: "network.rules", Why: "sandgate has no egress HTTP proxy to apply per-domain transforms"}
	case len(n.EgressProxy) > 0 && !isNull(n.EgressProxy):
		return nil, &UnsupportedError{Field: "network.egressProxy", Why: "sandgate cannot tunnel egress through a proxy"}
	case len(n.HTTPSPorts) > 0:
		return nil, &UnsupportedError{Field: "network.httpsPorts", Why: "sandgate reaches a sandbox's ports over plain HTTP, not TLS"}
	}
	return &n, nil
}

// MaxNetworkUpdateSize bounds E2B's PUT /sandboxes/{id}/network body
// (64 KiB, as sandgate's egress PUT).
const MaxNetworkUpdateSize = MaxEgressPutSize

// ErrNetworkUpdateBadRequest: the body is not E2B's
// SandboxNetworkUpdateConfig.
var ErrNetworkUpdateBadRequest = errors.New("network: bad request")

// NetworkUpdate is E2B's SandboxNetworkUpdateConfig, the body of PUT
// /sandboxes/{id}/network as the SDKs' updateNetwork sends it: it replaces
// the sandbox's egress rules, and a member left out is cleared (E2B:
// "omitting a field clears it"). corectl resolves it as a create's
// network is resolved (package createnet): the sandbox template's egress
// defaults, replaced by AllowOut when non-empty, minus DenyOut and, when
// AllowInternetAccess is false, minus 0.0.0.0/0; AllowOut is never
// carved.
type NetworkUpdate struct {
	// AllowOut is the allowed CIDRs or IP addresses (as written; a domain
	// name is refused when resolved).
	AllowOut []string
	// DenyOut is the denied CIDRs or IP addresses (as written).
	DenyOut []string
	// AllowInternetAccess is E2B's allow_internet_access (nil: absent or
	// null).
	AllowInternetAccess *bool
}

// IsNetworkUpdate reports whether body, which PUT /sandboxes/{id}/network
// received, is E2B's SandboxNetworkUpdateConfig rather than sandgate's
// EgressPut: a well-formed JSON object without the member defaultAction
// (which EgressPut requires and E2B's body does not have). Everything
// else, malformed bodies included, is EgressPut's to decode and answer,
// so that route's answers to sandgate's bodies stay as they were.
func IsNetworkUpdate(body []byte) bool {
	if len(body) > MaxNetworkUpdateSize {
		return false
	}
	raw, err := members(body)
	if err != nil {
		return false
	}
	_, sandgate := raw["defaultAction"]
	return !sandgate
}

// DecodeNetworkUpdate decodes E2B's SandboxNetworkUpdateConfig strictly:
// allowOut and denyOut arrays of strings, allow_internet_access a
// boolean (each may be absent or null); rules and egressProxy are refused
// with an *UnsupportedError unless empty or null; any other member is
// refused. Errors wrap ErrNetworkUpdateBadRequest (and strictjson's class
// or the *UnsupportedError where there is one).
func DecodeNetworkUpdate(body []byte) (NetworkUpdate, error) {
	var u NetworkUpdate
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %w", ErrNetworkUpdateBadRequest, fmt.Errorf(format, args...))
	}
	if len(body) > MaxNetworkUpdateSize {
		return u, bad("body larger than %d bytes", MaxNetworkUpdateSize)
	}
	raw, err := members(body)
	if errors.Is(err, errNotObject) {
		return u, bad("body must be a JSON object")
	}
	if err != nil {
		return u, bad("%w", err)
	}
	list := func(k string) ([]string, error) {
		v, ok := raw[k]
		if !ok || isNull(v) {
			return nil, nil
		}
		var out []string
		if json.Unmarshal(v, &out) != nil {
			return nil, bad("%s must be an array of strings", k)
		}
		if len(out) > cidr.MaxEntries {
			return nil, bad("%s: %w: %d entries, at most %d", k, cidr.ErrTooMany, len(out), cidr.MaxEntries)
		}
		return out, nil
	}
	for k, v := range raw {
		switch k {
		case "allowOut", "denyOut":
		case "allow_internet_access":
			if u.AllowInternetAccess, err = optBool(raw, k); err != nil {
				return u, bad("%w", err)
			}
		case "rules":
			var m map[string]json.RawMessage
			if json.Unmarshal(v, &m) != nil {
				return u, bad("rules must be an object")
			}
			if len(m) > 0 {
				return u, bad("%w", &UnsupportedError{Field: "rules", Why: "sandgate has no egress HTTP proxy to apply per-domain transforms"})
			}
		case "egressProxy":
			if !isNull(v) {
				return u, bad("%w", &UnsupportedError{Field: "egressProxy", Why: "sandgate cannot tunnel egress through a proxy"})
			}
		default:
			return u, bad("unknown field %q (only allowOut, denyOut, allow_internet_access)", k)
		}
	}
	if u.AllowOut, err = list("allowOut"); err != nil {
		return u, err
	}
	if u.DenyOut, err = list("denyOut"); err != nil {
		return u, err
	}
	return u, nil
}
