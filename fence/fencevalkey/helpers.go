package fencevalkey

import (
	"fmt"
	"time"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
)

// maxLeadMicros is fence.MaxTokenLead in microseconds, as the scripts
// count.
const maxLeadMicros = int64(fence.MaxTokenLead / time.Microsecond)

// invalid returns an error wrapping fence.ErrInvalid.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{fence.ErrInvalid}, args...)...)
}

// checkRetention returns Options.Retention r: the default for 0,
// KeepForever as is, an error for any other r ≤ 0.
func checkRetention(r time.Duration) (time.Duration, error) {
	switch {
	case r == 0:
		return lease.DefaultRetention, nil
	case r == lease.KeepForever:
		return r, nil
	case r < 0:
		return 0, invalid("Options.Retention %v is negative (lease.KeepForever keeps fences for good)", r)
	}
	return r, nil
}
