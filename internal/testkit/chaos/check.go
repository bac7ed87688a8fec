package chaos

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// EnvOut names the directory where Check writes the visualisation and the
// history of a failed check. Default: testdata/out in the package's
// directory (ignored by git).
const EnvOut = "LEASE_CHAOS_OUT"

// CheckOptions configure Check.
type CheckOptions struct {
	ModelOptions

	// Name names the files written on failure; a test passes t.Name().
	Name string

	// Timeout bounds porcupine's search. Default one minute. A search that
	// runs out of time is inconclusive, never a failure.
	Timeout time.Duration

	// NoFiles writes nothing on failure, for a check that is expected to
	// fail.
	NoFiles bool
}

// Result is the verdict of Check.
type Result struct {
	// Recorded is the number of operations in the history.
	Recorded int
	// Checked is the number of operations the model checked (the others
	// cannot change a verdict: see relevant).
	Checked int
	// Deadlines is the number of writes whose local deadline was checked
	// against the backend's expiry.
	Deadlines int
	// Clients is the number of Client.Acquire calls whose reported
	// outcome was checked (see checkClientOutcomes).
	Clients int
	// Permits is the number of permit acquisitions checked against their
	// semaphore's bound (see checkPermits).
	Permits int
	// Observed is the number of states observers reported that were
	// checked beside the model (see checkObservations).
	Observed int
	// Counts are the recorded operations per primitive.
	Counts Counts
	// Verdict is porcupine's: Ok, Illegal, or Unknown when the search ran
	// out of time.
	Verdict porcupine.CheckResult
	// Problems describes every violation found: porcupine's failed
	// partitions and the local deadlines that outlived the backend's
	// expiry.
	Problems []string
	// Files are the visualisation and the history written on failure.
	Files []string
}

// OK reports whether no violation was found. An inconclusive search is not
// a violation.
func (r Result) OK() bool { return len(r.Problems) == 0 }

func (r Result) String() string {
	s := fmt.Sprintf("%d operations recorded, %d checked by the model (%s), %d local deadlines checked, %d client outcomes checked",
		r.Recorded, r.Checked, r.Verdict, r.Deadlines, r.Clients)
	if r.Observed > 0 {
		s += fmt.Sprintf(", %d observed states checked", r.Observed)
	}
	if r.Counts.Permits.Acquires+r.Counts.Sets.Acquires > 0 {
		s += fmt.Sprintf(", %d permit acquisitions checked against their bound; %v", r.Permits, r.Counts)
	}
	for _, p := range r.Problems {
		s += "\n\t" + p
	}
	if len(r.Files) > 0 {
		s += "\n\tvisualisation and history: " + strings.Join(r.Files, ", ")
	}
	return s
}

// Check checks a history against the model (see model.go) and checks
// every sampled local deadline against the backend's expiry (see
// checkDeadlines). On a violation it writes porcupine's HTML visualisation
// and the history as JSON lines to OutDir and names them in the result.
func Check(history []Op, o CheckOptions) Result {
	if o.Timeout == 0 {
		o.Timeout = time.Minute
	}
	res := Result{Recorded: len(history), Counts: CountOps(history)}
	recorded := history
	history = Expand(history)
	ops, notes := porcupineHistory(history)
	res.Checked = len(ops)
	model := Model(o.ModelOptions)
	verdict, info := porcupine.CheckOperationsVerbose(model, ops, o.Timeout)
	res.Verdict = verdict
	if verdict == porcupine.Illegal {
		res.Problems = append(res.Problems, failedPartitions(o.ModelOptions, ops, o.Timeout)...)
	}
	deadlines, checked := checkDeadlines(history)
	res.Deadlines = checked
	res.Problems = append(res.Problems, deadlines...)
	res.Problems = append(res.Problems, checkTokens(history)...)
	permits, held := checkPermits(o.ModelOptions, history)
	res.Permits = held
	res.Problems = append(res.Problems, permits...)
	res.Problems = append(res.Problems, checkSemaphoreTokens(history)...)
	observed, n := checkObservations(history)
	res.Observed = n
	res.Problems = append(res.Problems, observed...)
	outcomes, clients := checkClientOutcomes(history)
	res.Clients = clients
	res.Problems = append(res.Problems, outcomes...)
	if !res.OK() && !o.NoFiles {
		info.AddAnnotations(notes)
		res.Files = writeFailure(o.Name, model, info, recorded, &res)
	}
	return res
}

// unknownReturn is the return time of an operation whose outcome is
// unknown: it may take effect at any time after its call.
const unknownReturn = math.MaxInt64

// porcupineHistory turns the relevant operations of history into
// porcupine operations (a copy of each data-losing fault per lease key,
// and of each replica's catching up and each fault that lost the fences
// per resource), and the others into annotations for the visualisation.
func porcupineHistory(history []Op) ([]porcupine.Operation, []porcupine.Annotation) {
	lanes := map[string]int{}
	var names []string
	for _, op := range history {
		if _, ok := lanes[op.Lane]; !ok && op.Kind != KindFault && op.Kind != KindClock && op.Lane != "" {
			lanes[op.Lane] = 0
			names = append(names, op.Lane)
		}
	}
	slices.SortFunc(names, compareLanes)
	for i, n := range names {
		lanes[n] = i
	}
	keys, resources := map[string]bool{}, map[string]bool{}
	for _, op := range history {
		switch op.Kind {
		case KindAcquire:
			if op.Sem == "" || op.Key != op.Sem { // a refused permit names no permit key
				keys[op.Key] = true
			}
		case KindWrite, KindRead:
			resources[op.Resource] = true
		}
	}
	split := splitAcquisitions(history)
	var (
		ops   []porcupine.Operation
		notes []porcupine.Annotation
	)
	add := func(op Op) {
		if op.Outcome == Unknown {
			op.Return = unknownReturn
		}
		ops = append(ops, porcupine.Operation{ClientId: lanes[op.Lane], Input: op, Call: op.Call, Output: nil, Return: op.Return})
	}
	perResource := func(op Op) {
		for _, r := range slices.Sorted(maps.Keys(resources)) {
			op.Key, op.Resource, op.Lane = "", r, "nemesis"
			add(op)
		}
	}
	for _, op := range history {
		switch {
		case op.Kind == KindFault:
			notes = append(notes, porcupine.Annotation{Tag: "nemesis", Start: op.Call, End: op.Return,
				Description: op.Fault, BackgroundColor: "#f4cccc"})
			if op.LostData || op.EndsLeases {
				for _, k := range slices.Sorted(maps.Keys(keys)) {
					op.Key = k
					op.Lane = "nemesis"
					add(op)
				}
			}
			if op.LostData && op.LostFences {
				perResource(op)
			}
		case op.Kind == KindReplicated:
			notes = append(notes, porcupine.Annotation{Tag: "nemesis", Start: op.Call, End: op.Return,
				Description: describe(op), BackgroundColor: "#d9ead3"})
			perResource(op)
		case split[acqRef{op.Key, op.Acq}] && isLeaseOp(op):
			notes = append(notes, porcupine.Annotation{ClientId: lanes[op.Lane], Start: op.Call, End: op.Return,
				Description: "split brain: " + describe(op), Details: strings.TrimSuffix(string(op.Outcome)+": "+op.Err, ": "), BackgroundColor: "#fce5cd"})
		case op.Kind == KindClock:
			notes = append(notes, porcupine.Annotation{Tag: "clock", Start: op.Call, End: op.Return, Description: op.Fault})
		case relevant(op):
			add(op)
		default:
			end := op.Return
			if op.Outcome == Unknown {
				end = op.Call
			}
			notes = append(notes, porcupine.Annotation{ClientId: lanes[op.Lane], Start: op.Call, End: end,
				Description: describe(op), Details: strings.TrimSuffix(string(op.Outcome)+": "+op.Err, ": "), BackgroundColor: "#eeeeee"})
		}
	}
	return ops, notes
}

// acqRef names one acquisition of one key.
type acqRef struct{ key, acq string }

func isLeaseOp(op Op) bool {
	return op.Kind == KindAcquire || op.Kind == KindRenew || op.Kind == KindRelease || op.Kind == KindForceRelease
}

// splitAcquisitions returns the acquisitions with a lease operation
// during a fault marked SplitBrain (an operation with an unknown outcome
// counts from its call on).
func splitAcquisitions(history []Op) map[acqRef]bool {
	type window struct{ from, to int64 }
	var windows []window
	for _, op := range history {
		if op.Kind == KindFault && op.SplitBrain {
			windows = append(windows, window{op.Call, op.Return})
		}
	}
	out := map[acqRef]bool{}
	if len(windows) == 0 {
		return out
	}
	for _, op := range history {
		if !isLeaseOp(op) || op.Acq == "" {
			continue
		}
		end := op.Return
		if op.Outcome == Unknown {
			end = math.MaxInt64
		}
		for _, w := range windows {
			if op.Call <= w.to && end >= w.from {
				out[acqRef{op.Key, op.Acq}] = true
				break
			}
		}
	}
	return out
}

// checkTokens checks that no token of a key was granted to two
// acquisitions. The model checks that too, but not for the acquisitions it
// leaves out (see Op.SplitBrain); this check reads every grant.
func checkTokens(history []Op) []string {
	type grant struct {
		key   string
		token uint64
	}
	first := map[grant]Op{}
	var problems []string
	for _, op := range history {
		if op.Kind != KindAcquire || op.Outcome != OK {
			continue
		}
		g := grant{op.Key, op.Token}
		if f, ok := first[g]; ok && f.Acq != op.Acq {
			problems = append(problems, fmt.Sprintf("lease %s: token %d granted twice: to %s (lane %s at %s) and to %s (lane %s at %s)",
				op.Key, op.Token, f.Acq, f.Lane, fmtMicros(f.Call), op.Acq, op.Lane, fmtMicros(op.Call)))
			continue
		}
		if _, ok := first[g]; !ok {
			first[g] = op
		}
	}
	return problems
}

var laneRE = regexp.MustCompile(`^(.*)/(\d+)$`)

// compareLanes orders lane ids by prefix, then number.
func compareLanes(a, b string) int {
	ma, mb := laneRE.FindStringSubmatch(a), laneRE.FindStringSubmatch(b)
	if ma == nil || mb == nil || ma[1] != mb[1] {
		return strings.Compare(a, b)
	}
	na, _ := strconv.Atoi(ma[2])
	nb, _ := strconv.Atoi(mb[2])
	return cmp.Compare(na, nb)
}

// failedPartitions checks each partition on its own and describes those
// that are not linearizable.
func failedPartitions(o ModelOptions, ops []porcupine.Operation, timeout time.Duration) []string {
	model := Model(o)
	var out []string
	for _, part := range model.Partition(ops) {
		if porcupine.CheckOperationsTimeout(model, part, timeout) != porcupine.Illegal {
			continue
		}
		name := partition(part[0].Input.(Op))
		out = append(out, fmt.Sprintf("%s: not linearizable (%d operations); %s", name, len(part), explain(model, part, timeout)))
	}
	return out
}

// explain names a likely culprit in a partition that is not linearizable:
// the last operation of the shortest prefix, in call order, that is not
// linearizable on its own, found by bisection. It is a hint for the
// reader; the visualisation shows the whole story.
func explain(model porcupine.Model, part []porcupine.Operation, timeout time.Duration) string {
	sorted := slices.Clone(part)
	slices.SortStableFunc(sorted, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	lo, hi := 1, len(sorted) // the prefix of hi operations is illegal
	for lo < hi {
		mid := (lo + hi) / 2
		if porcupine.CheckOperationsTimeout(model, sorted[:mid], timeout) == porcupine.Illegal {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	op := sorted[hi-1].Input.(Op)
	return fmt.Sprintf("the shortest prefix (by call time) that is not linearizable ends at %s with lane %s: %s",
		fmtMicros(op.Call), op.Lane, describe(op))
}

// checkDeadlines checks that no client believed it held a lease past the
// backend's expiry. For each write that sampled the client's remaining
// time R between its call time x0 and SampledBy x1, the client believed it
// held the lease until at least x0 + R. The backend's expiry at x1 is at
// most max over the acquisition's acquire and renew calls e that may have
// been applied before x1 (OK or Unknown, called before x1) of
// min(return(e), x1) + TTL + 1ms (backends round the TTL up to whole
// milliseconds). A belief beyond that is a violation. It returns the
// violations and the number of writes checked.
func checkDeadlines(history []Op) ([]string, int) {
	// By the handle's key: a lease's or a permit's key, or a set's keys
	// joined (a write fenced by a semaphore's key or by a key of a set
	// names its handle's key in Lease).
	type acq struct{ key, id string }
	extends := map[acq][]Op{}
	for _, op := range history {
		if (op.Kind == KindAcquire || op.Kind == KindRenew) && (op.Outcome == OK || op.Outcome == Unknown) {
			a := acq{op.Key, op.Acq}
			if op.Keys != nil {
				if op.Key != op.Keys[0] {
					continue // one copy of a set's operation is enough
				}
				a.key = strings.Join(op.Keys, ",")
			}
			extends[a] = append(extends[a], op)
		}
	}
	var (
		problems []string
		checked  int
	)
	for _, w := range history {
		if w.Kind != KindWrite || w.SampledBy == 0 || w.Acq == "" {
			continue
		}
		x1 := w.SampledBy
		var hi int64 = math.MinInt64
		for _, e := range extends[acq{cmp.Or(w.Lease, w.Key), w.Acq}] {
			if e.Call >= x1 {
				continue
			}
			ret := e.Return
			if e.Outcome == Unknown {
				ret = x1
			}
			hi = max(hi, min(ret, x1)+e.TTL+int64(time.Millisecond/time.Microsecond))
		}
		if hi == math.MinInt64 {
			continue // no grant of this acquisition in the history
		}
		checked++
		if belief := w.Call + w.Remaining; belief > hi {
			problems = append(problems, fmt.Sprintf("lease %s: lane %s believed acquisition %s/%d held until %s, but the backend's expiry was at most %s (%v earlier): %s",
				w.Key, w.Lane, w.Acq, w.Token, fmtMicros(belief), fmtMicros(hi), time.Duration(belief-hi)*time.Microsecond, describe(w)))
		}
	}
	return problems, checked
}

// checkClientOutcomes checks what Client.Acquire reported (KindClient
// operations), not only what the backend answered: an error that does not
// match lease.ErrIndeterminate (Failed) promises that no grant exists or
// can still appear for the call. Every call has an owner string of its
// own, so a holder named by a later answer can only have been granted by
// one of that call's attempts. A violation is an answer called after a
// Failed call returned that names the call's owner as the holder: an
// acquisition the caller was told does not exist. A fault that lost data
// after the call began excuses it (the store may have gone back to a state
// before the call's clean-up release). It returns the violations and the
// number of calls checked.
func checkClientOutcomes(history []Op) ([]string, int) {
	calls := map[string]Op{} // owner → its Client.Acquire call
	var lossy []int64        // call times of faults that lost data
	for _, op := range history {
		switch {
		case op.Kind == KindClient:
			calls[op.Owner] = op
		case op.Kind == KindFault && op.LostData:
			lossy = append(lossy, op.Call)
		}
	}
	n := 0
	for _, c := range calls {
		if c.Outcome != OK {
			n++
		}
	}
	var problems []string
	for _, op := range history {
		if op.Kind != KindAcquire || op.Outcome != NotAcquired || op.Holder == "" {
			continue
		}
		c, ok := calls[op.Holder]
		if !ok || c.Outcome != Failed || op.Call <= c.Return {
			continue
		}
		if slices.ContainsFunc(lossy, func(t int64) bool { return t >= c.Call }) {
			continue
		}
		problems = append(problems, fmt.Sprintf("lease %s: Client.Acquire of %s returned at %s with an error that does not match lease.ErrIndeterminate (%s), but at %s lane %s found the key held by %s with token %d",
			c.Key, c.Owner, fmtMicros(c.Return), c.Err, fmtMicros(op.Call), op.Lane, op.Holder, op.Out))
		calls[op.Holder] = Op{} // one report per call
	}
	return problems, n
}

func fmtMicros(us int64) string { return time.UnixMicro(us).UTC().Format("15:04:05.000000") }

// OutDir returns the directory for the files of failed checks:
// $LEASE_CHAOS_OUT, or testdata/out.
func OutDir() string {
	if d := os.Getenv(EnvOut); d != "" {
		return d
	}
	return filepath.Join("testdata", "out")
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// writeFailure writes the visualisation and the history of a failed check
// and returns their paths. A failure to write is added to res.Problems.
func writeFailure(name string, model porcupine.Model, info porcupine.LinearizationInfo, history []Op, res *Result) []string {
	dir := OutDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		res.Problems = append(res.Problems, fmt.Sprintf("writing the visualisation: %v", err))
		return nil
	}
	base := unsafeName.ReplaceAllString(cmp.Or(name, "history"), "_") + "-" + time.Now().UTC().Format("20060102T150405.000")
	html := filepath.Join(dir, base+".html")
	hist := filepath.Join(dir, base+".jsonl")
	var files []string
	if err := porcupine.VisualizePath(model, info, html); err != nil {
		res.Problems = append(res.Problems, fmt.Sprintf("writing the visualisation: %v", err))
	} else {
		files = append(files, absPath(html))
	}
	var b strings.Builder
	for _, op := range history {
		j, _ := json.Marshal(op)
		b.Write(j)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(hist, []byte(b.String()), 0o644); err != nil {
		res.Problems = append(res.Problems, fmt.Sprintf("writing the history: %v", err))
	} else {
		files = append(files, absPath(hist))
	}
	return files
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
