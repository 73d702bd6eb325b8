package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeMainBuilds extracts the README's Go program (its first ```go
// block that is a package main) and vets it inside this module, so the
// front door fails the build when the API it shows changes.
func TestReadmeMainBuilds(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	program := readmeMain(readme)
	if program == "" {
		t.Fatal("README.md has no ```go block holding a package main")
	}
	// A directory whose name starts with a dot is inside the module, so the
	// program's imports resolve through go.mod, yet no ./... pattern lists it.
	dir, err := os.MkdirTemp(".", ".readme-main-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(goTool, "vet", "./"+filepath.ToSlash(dir)).CombinedOutput()
	if err != nil {
		t.Fatalf("the README's program does not build: %v\n%s\n--- the program:\n%s", err, out, program)
	}
}

// readmeMain returns the first ```go block of markdown whose code declares
// package main, or "" if there is none.
func readmeMain(markdown []byte) string {
	var block strings.Builder
	inGo := false
	lines := bufio.NewScanner(bytes.NewReader(markdown))
	for lines.Scan() {
		line := lines.Text()
		switch {
		case !inGo && strings.TrimSpace(line) == "```go":
			inGo = true
			block.Reset()
		case inGo && strings.TrimSpace(line) == "```":
			inGo = false
			if strings.HasPrefix(block.String(), "package main\n") {
				return block.String()
			}
		case inGo:
			block.WriteString(line + "\n")
		}
	}
	return ""
}

// TestReadmeTestSnippet: the body of the README's test under "Test your
// endpoint" is, line for line, the body of idempotencytest's
// ExampleRequireIdempotent, which the compiler checks.
func TestReadmeTestSnippet(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(filepath.Join("..", "idempotencytest", "example_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, found := strings.Cut(string(readme), "## Test your endpoint\n")
	_, block, _ := strings.Cut(section, "```go\n")
	block, _, closed := strings.Cut(block, "```\n")
	lines := strings.Split(strings.TrimSpace(block), "\n")
	if !found || !closed || len(lines) < 3 {
		t.Fatal("README.md has no ```go block under ## Test your endpoint")
	}
	for _, line := range lines[1 : len(lines)-1] { // inside func TestX(t *testing.T) { ... }
		if !strings.Contains(string(example), strings.TrimSpace(line)) {
			t.Errorf("the README's line %q is not in idempotencytest/example_test.go", line)
		}
	}
}
