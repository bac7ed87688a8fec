// Package docstest checks that the Go code shown in README.md and docs/ is
// the code of compiled, tested files, and that the quickstarts run as
// pasted.
//
// Every ```go block of those pages is a complete Go file, which the tests
// build in a module of their own, or carries one of these markers on the
// line right before it:
//
//	<!-- code: examples/readme/main.go#shape -->
//
// The block equals, line for line, the region of that file between the
// comments "// docs:begin shape" and "// docs:end shape" (with the region's
// common indentation removed).
//
//	<!-- fragment: examples/postgres/main.go -->
//
// The block's lines appear in that file, one after another (indentation
// aside).
//
//	<!-- program: examples/postgres/main.go -->
//
// The block is the next part of a program: the program blocks of a page,
// joined by blank lines, are that file, byte for byte. A reader copies them
// in order into main.go; the tests do exactly that, build the result in a
// fresh module (with a replace of this module) and run it against real
// servers, with the environment the page tells the reader to set.
//
// A page with a marked block must link the file it names (or its
// directory), so that the reader can find the whole. The named files are
// compiled by go build and go vet like any other, so the documentation
// cannot show code that does not compile.
package docstest
