package proto

// ObservationResources is the only Observation.Kind: the sandbox's
// resource use, answered with a Sample.
const ObservationResources = "resources"

// param is a bit set of a request's parameter members.
type param uint8

const (
	paramBootstrap param = 1 << iota
	paramCommand
	paramObservation
	paramGeneration
	paramSnapshot
	paramCompute
	paramSuspend
	paramResume
)

// paramOrder lists the parameter members in Request's member order.
var paramOrder = []struct {
	bit  param
	name string
}{
	{paramBootstrap, "bootstrap"},
	{paramCommand, "command"},
	{paramObservation, "observation"},
	{paramGeneration, "generation"},
	{paramSnapshot, "snapshot"},
	{paramCompute, "compute"},
	{paramSuspend, "suspend"},
	{paramResume, "resume"},
}

// Result member names of a Response, in its member order.
const (
	resultNone    = ""
	resultInfo    = "info"
	resultCommand = "command"
	resultSample  = "sample"
	resultCompute = "compute"
	resultState   = "state"
)

// opSpec is one row of the spec's operation table.
type opSpec struct {
	required, optional param
	result             string
}

// operationTable is the spec's operation table ("Provider requests").
var operationTable = map[Operation]opSpec{
	OpCreate:         {required: paramBootstrap, result: resultInfo},
	OpInfo:           {result: resultInfo},
	OpRenew:          {result: resultInfo},
	OpKill:           {result: resultNone},
	OpCommand:        {required: paramCommand, result: resultCommand},
	OpObserve:        {required: paramObservation, result: resultSample},
	OpInitial:        {result: resultCompute},
	OpNewCompute:     {required: paramGeneration, optional: paramSnapshot, result: resultCompute},
	OpCompute:        {required: paramCompute, result: resultState},
	OpKillCompute:    {required: paramCompute, result: resultNone},
	OpResumeCompute:  {required: paramCompute, result: resultState},
	OpCommandCompute: {required: paramCompute | paramCommand, result: resultCommand},
	OpSuspend:        {required: paramSuspend, result: resultState},
	OpResume:         {required: paramResume, result: resultState},
	OpDeleteSnapshot: {required: paramSnapshot, result: resultNone},
}

// params returns the parameter members present in r.
func (r *Request) params() param {
	var p param
	if r.Bootstrap != nil {
		p |= paramBootstrap
	}
	if r.Command != nil {
		p |= paramCommand
	}
	if r.Observation != nil {
		p |= paramObservation
	}
	if r.Generation != nil {
		p |= paramGeneration
	}
	if r.Snapshot != nil {
		p |= paramSnapshot
	}
	if r.Compute != nil {
		p |= paramCompute
	}
	if r.Suspend != nil {
		p |= paramSuspend
	}
	if r.Resume != nil {
		p |= paramResume
	}
	return p
}

type resultMember struct {
	name    string
	present bool
}

// results lists the result members of r in member order.
func (r *Response) results() [5]resultMember {
	return [5]resultMember{
		{resultInfo, r.Info != nil},
		{resultCommand, r.Command != nil},
		{resultSample, r.Sample != nil},
		{resultCompute, r.Compute != nil},
		{resultState, r.State != nil},
	}
}

// ValidateFor checks r as the answer to a request of operation op: the
// context-free rules Decode applies, then that a success carries exactly
// the operation's result member (none for kill, kill_compute and
// delete_snapshot) and that only a failed create carries an info receipt.
// It does not compare unsupported.operation with op: mismatched evidence
// is not malformed, it classifies as OutcomeUnknown (see Classify). The
// error is an *Error with Rule ErrResult (or the rule Decode would report).
func (r *Response) ValidateFor(op Operation) error {
	if r == nil {
		return newError(ErrResult, "", "no response")
	}
	spec, ok := operationTable[op]
	if !ok {
		return newError(ErrResult, "", "the request's operation is not one of the 15 operations")
	}
	if err := r.validate(); err != nil {
		return err
	}
	results := r.results()
	if r.ErrorCode == "" {
		have := false
		for _, m := range results {
			if !m.present {
				continue
			}
			if m.name != spec.result {
				return newError(ErrResult, "/"+m.name, "not the result member of the request's operation")
			}
			have = true
		}
		if spec.result != resultNone && !have {
			return newError(ErrResult, "/"+spec.result, "a success carries the operation's result member")
		}
		return nil
	}
	if r.Info != nil && op != OpCreate {
		return newError(ErrResult, "/info", "only a failed create carries an info receipt")
	}
	return nil
}

// Outcome is how Core reads a response to a request (spec "Provider
// requests"). The zero value is OutcomeUnknown, so an unset Outcome never
// proves anything.
type Outcome int

// Outcomes.
const (
	// OutcomeUnknown: the outcome is unknown (error_code unconfirmed, any
	// unknown code, or a response that does not fit the request, including
	// missing or mismatched unsupported evidence). It never proves that a
	// resource does not exist or that a mutation was rejected; Core
	// observes instead of replaying.
	OutcomeUnknown Outcome = iota
	// OutcomeSuccess: the operation succeeded and the response carries its
	// result.
	OutcomeSuccess
	// OutcomeFailed: a definite provider error: invalid, ownership, exists,
	// not_found, command_unconfirmed, observation_unavailable or
	// runtime_not_running.
	OutcomeFailed
	// OutcomeUnsupported: the node declared the request's exact operation
	// unsupported, with a valid reason equal to the registered
	// declaration's. It does not determine ownership and does not
	// authorize a replay.
	OutcomeUnsupported
)

// String returns "unknown", "success", "failed" or "unsupported".
func (o Outcome) String() string {
	switch o {
	case OutcomeSuccess:
		return "success"
	case OutcomeFailed:
		return "failed"
	case OutcomeUnsupported:
		return "unsupported"
	}
	return "unknown"
}

// definiteCodes are the error codes that classify as OutcomeFailed.
var definiteCodes = map[ErrorCode]bool{
	ErrInvalid:                true,
	ErrOwnership:              true,
	ErrExists:                 true,
	ErrNotFound:               true,
	ErrCommandUnconfirmed:     true,
	ErrObservationUnavailable: true,
	ErrRuntimeNotRunning:      true,
}

// Classify reads resp as the answer to req and returns its outcome and
// code. declared is the registered declaration's evidence for
// req.Operation: the exact operation and authored reason when the node's
// provider declares it unsupported, nil when the declaration supports it
// or no declaration is registered for the provider (package
// node/operation holds the registry; proto cannot import it).
//
//   - (OutcomeSuccess, "") for a success whose result fits req.Operation
//     (an info result must name req.Reference exactly and
//     req.DeploymentGeneration: an info of another generation is not the
//     answer about the allocation in the request's, spec "Object: Info");
//   - (OutcomeFailed, code) for the seven definite error codes;
//   - (OutcomeUnsupported, ErrUnsupported) only when the evidence is
//     valid, its operation equals req.Operation and both its operation and
//     reason equal declared's (spec "Provider requests": the proxy checks
//     the evidence against the request and the registered declaration);
//   - (OutcomeUnknown, ErrUnconfirmed) for everything else: unconfirmed,
//     any unknown code, missing, malformed or mismatched evidence (also
//     evidence for an operation the declaration supports, or with no
//     declaration at all), a response whose id or connection_id differs
//     from req's, or one that fails Response.ValidateFor(req.Operation).
//
// An info receipt on a failed create does not change the classification
// and is kept in resp: CreateReceipt returns it when it proves a settled
// create attempt.
func Classify(req *Request, resp *Response, declared *Unsupported) (Outcome, ErrorCode) {
	if req == nil || resp == nil || resp.ID != req.ID || resp.ConnectionID != req.ConnectionID {
		return OutcomeUnknown, ErrUnconfirmed
	}
	if resp.ValidateFor(req.Operation) != nil {
		return OutcomeUnknown, ErrUnconfirmed
	}
	switch code := resp.ErrorCode; {
	case code == "":
		if resp.Info != nil && !resp.Info.answers(req) {
			return OutcomeUnknown, ErrUnconfirmed
		}
		return OutcomeSuccess, ""
	case definiteCodes[code]:
		return OutcomeFailed, code
	case code == ErrUnsupported && resp.Unsupported.Operation == req.Operation &&
		declared != nil && *resp.Unsupported == *declared:
		return OutcomeUnsupported, ErrUnsupported
	}
	return OutcomeUnknown, ErrUnconfirmed
}

// answers reports whether i is about req's exact reference in req's
// deployment generation.
func (i *Info) answers(req *Request) bool {
	return i.Reference == req.Reference && i.DeploymentGeneration == req.DeploymentGeneration
}

// CreateReceipt returns the info receipt of a failed create (spec: an
// exact-reference CreateSettled receipt proves that the attempt has a
// settled outcome even though a later check failed). It returns false
// unless req is a create, resp answers it (same id and connection), resp
// is a failure that passes ValidateFor, and the receipt names
// req.Reference and req.DeploymentGeneration exactly.
func CreateReceipt(req *Request, resp *Response) (*Info, bool) {
	if req == nil || resp == nil || req.Operation != OpCreate || resp.ID != req.ID ||
		resp.ConnectionID != req.ConnectionID || resp.ErrorCode == "" || resp.Info == nil {
		return nil, false
	}
	if resp.ValidateFor(OpCreate) != nil || !resp.Info.answers(req) {
		return nil, false
	}
	return resp.Info, true
}
