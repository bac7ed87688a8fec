package fence

// Exported for the tests in package fence_test.
var (
	FenceLua       = fenceSource
	KeySlot        = keySlot
	CommitError    = commitError
	CheckPredicate = checkPredicate
)
