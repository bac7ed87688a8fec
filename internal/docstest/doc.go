// Package docstest checks that the Go code shown in README.md and docs/ is
// the code of compiled, tested files.
//
// A Markdown code block that starts right after a line
//
//	<!-- code: examples/readme/main.go#shape -->
//
// must equal, line for line, the region of that file between the comments
// "// docs:begin shape" and "// docs:end shape" (with the region's common
// indentation removed). The file is compiled by go build and go vet like
// any other, so the documentation cannot show code that does not compile.
package docstest
