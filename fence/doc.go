// Package fence makes storage refuse writes from a lease holder that has
// been superseded: every fenced write carries the lease's key and fencing
// token, and is applied only if the resource's fence admits them.
package fence
