//go:build !unix

package lease_test

import "time"

func cpuTime() (time.Duration, bool) { return 0, false }
