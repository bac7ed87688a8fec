package fencevalkey

// Exported for the tests in package fencevalkey_test.
var (
	FenceLua = fenceSource
	KeySlot  = keySlot
	SlotTag  = slotTag
)
