// Command upstream-go-sdk drives upstream agent-sandbox's Go SDK (sigs.k8s.io/agent-sandbox/clients/go/sandbox,
// RuntimeSandboxd) against a warm pool, for test/sandboxd/upstream-sdk.test.ts: it claims a sandbox, runs what the
// test names, deletes the claim, and prints one JSON line of what it saw (errors included, as strings).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
)

func main() {
	out := map[string]any{}
	if err := run(out); err != nil {
		out["error"] = err.Error()
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}

func run(out map[string]any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG_PATH"))
	if err != nil {
		return err
	}
	sb, err := sandbox.New(ctx, sandbox.Options{WarmPoolName: os.Getenv("POOL"), Namespace: os.Getenv("NS"),
		Runtime: sandbox.RuntimeSandboxd, RestConfig: cfg, SandboxReadyTimeout: 4 * time.Minute, Quiet: true})
	if err != nil {
		return fmt.Errorf("new: %w", err)
	}
	if err := sb.Open(ctx); err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer func() {
		if err := sb.Close(context.Background()); err != nil {
			out["close"] = err.Error()
		}
	}()
	if r, err := sb.Run(ctx, "echo hello world"); err != nil {
		out["echo"] = err.Error()
	} else {
		out["echo"] = []any{r.ExitCode, r.Stdout, r.Stderr}
	}
	if err := sb.Write(ctx, "go/dir/hello.txt", []byte("hi from go\n")); err != nil {
		out["write"] = err.Error()
	}
	if b, err := sb.Read(ctx, "go/dir/hello.txt"); err != nil {
		out["read"] = err.Error()
	} else {
		out["read"] = string(b)
	}
	if es, err := sb.List(ctx, "go/dir"); err != nil {
		out["list"] = err.Error()
	} else {
		list := []any{}
		for _, e := range es {
			list = append(list, []any{e.Name, string(e.Type), e.Size, e.Mode})
		}
		out["list"] = list
	}
	yes, err1 := sb.Exists(ctx, "go/dir/hello.txt")
	no, err2 := sb.Exists(ctx, "go/dir/missing.txt")
	out["exists"] = []any{yes, no, fmt.Sprint(err1), fmt.Sprint(err2)}
	if err := sb.Delete(ctx, "go", true); err != nil {
		out["delete"] = err.Error()
	}
	gone, err := sb.Exists(ctx, "go")
	out["after_delete"] = []any{gone, fmt.Sprint(err)}
	return nil
}
