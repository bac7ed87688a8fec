package leaseservice

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Check reports whether the service is doing what a replica of a singleton
// should: nil while Run campaigns, holds the lease and renews it, or
// pauses between terms (after a failure, the restart delay); an error that
// says what is wrong otherwise:
//
//   - Run has not been called, or has returned (with Options.StopOnError
//     after a failure, on an error retrying cannot cure, or at shutdown):
//     the replica no longer campaigns. The error wraps Run's, if any.
//   - The lease's local deadline passed more than Options.HealthGrace ago
//     and the function has not returned: renewals have failed past the
//     deadline and the function does not step down (it ignores its
//     context), so it may act without a lease.
//   - A backend call of the campaign (an acquire attempt, or the setup of
//     a release watch) has been in flight for more than its bound, the
//     policy's OperationTimeout, plus HealthGrace: a backend call that
//     does not return.
//
// A replica that waits for another's lease is healthy, however long it
// waits: only the leader runs the function. Check reads local state on
// the client's clock and does no I/O; it is safe for concurrent use. Use
// it as a func() error wherever a health check takes one, or serve it
// with HealthHandler.
func (s *Service) Check() error {
	s.mu.Lock()
	st, h, runErr := s.state, s.handle, s.runErr
	s.mu.Unlock()
	now := s.client.Clock().Now()
	switch st {
	case idle:
		return fmt.Errorf("leaseservice: %q: not campaigning: Run has not been called", s.key)
	case returned:
		if runErr != nil {
			return fmt.Errorf("leaseservice: %q: not campaigning: Run returned: %w", s.key, runErr)
		}
		return fmt.Errorf("leaseservice: %q: not campaigning: Run returned", s.key)
	case campaigning:
		op, since := s.b.inFlight()
		if op == "" {
			return nil // waiting for the holder: healthy however long
		}
		bound := s.policy.Options().OperationTimeout
		if late := now.Sub(since) - bound; late > s.o.HealthGrace {
			return fmt.Errorf("leaseservice: %q: campaign stuck: %s began %v ago, %v past its bound", s.key, op, now.Sub(since).Round(time.Millisecond), late.Round(time.Millisecond))
		}
	case holding:
		if h == nil {
			return nil
		}
		if late := now.Sub(h.Deadline()); late > s.o.HealthGrace {
			return fmt.Errorf("leaseservice: %q: token %d: the lease's local deadline passed %v ago and the function has not returned", s.key, h.Token(), late.Round(time.Millisecond))
		}
	}
	return nil
}

// HealthHandler returns an http.Handler that runs every check (such as
// Service.Check) on each request and answers 200 "ok" if all return nil,
// or 503 Service Unavailable with one line per failed check. It is the
// shape of client-go's leader-election healthz adaptor, for a liveness or
// readiness probe:
//
//	http.Handle("/healthz", leaseservice.HealthHandler(svc.Check))
//
// The checks run on the request's goroutine and should not block.
func HealthHandler(checks ...func() error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var errs []error
		for _, c := range checks {
			if err := c(); err != nil {
				errs = append(errs, err)
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if len(errs) == 0 {
			w.WriteHeader(http.StatusOK)
			fmt.Fprintln(w, "ok")
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, errors.Join(errs...))
	})
}
