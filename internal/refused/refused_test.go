package refused_test

import (
	"errors"
	"testing"

	"github.com/golib/lease/cache"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/internal/refused"
)

// TestPublicSentinelsAreTheseValues checks that the public sentinels are
// the values code outside their packages tests for, and that the typed
// errors match them.
func TestPublicSentinelsAreTheseValues(t *testing.T) {
	if fence.ErrStale != refused.ErrStale {
		t.Error("fence.ErrStale is not refused.ErrStale")
	}
	if cache.ErrInvalidated != refused.ErrInvalidated {
		t.Error("cache.ErrInvalidated is not refused.ErrInvalidated")
	}
	if !errors.Is(&fence.StaleError{}, refused.ErrStale) {
		t.Error("a *fence.StaleError does not match refused.ErrStale")
	}
	if !errors.Is(&cache.InvalidatedError{}, refused.ErrInvalidated) {
		t.Error("a *cache.InvalidatedError does not match refused.ErrInvalidated")
	}
}
