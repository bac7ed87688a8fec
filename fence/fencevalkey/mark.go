package fencevalkey

import (
	"context"
	"fmt"
	"strconv"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
)

// Mark returns the fence of resource, read from its fence key (see
// FenceKey), the zero Mark if the resource has accepted nothing. Like
// Table.Mark it is a plain read for operators and monitoring.
func (v *Fence) Mark(ctx context.Context, resource string) (fence.Mark, error) {
	if err := fence.ValidateResource(resource); err != nil {
		return fence.Mark{}, err
	}
	fk := v.FenceKey(resource)
	vals, err := v.client.Do(ctx, v.client.B().Hmget().Key(fk).Field("key", "token").Build()).ToArray()
	if err != nil {
		return fence.Mark{}, classify(resource, err)
	}
	if len(vals) != 2 || vals[0].IsNil() {
		return fence.Mark{}, nil
	}
	key, _ := vals[0].ToString()
	tok, _ := vals[1].ToString()
	n, err := strconv.ParseUint(tok, 10, 64)
	if err != nil {
		return fence.Mark{}, fmt.Errorf("fence: resource %q: fence key %q holds token %q, not a number", resource, fk, tok)
	}
	return fence.Mark{Key: key, Token: lease.Token(n)}, nil
}
