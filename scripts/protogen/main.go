// Command protogen regenerates agent/upstream/processv1/*.pb.go from process.proto without protoc: protocompile
// (pure Go) parses the file into descriptors, and the two official plugins, protoc-gen-go and protoc-gen-go-grpc,
// run as `go tool` at the versions pinned in this module's go.mod (fetched through the Go module proxy), read the CodeGeneratorRequest on
// stdin as they would from protoc. Run it from this directory: `go run .` (see docs/runtime-adapter.md "How
// upstream's SDKs reach a microVM").
package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"
)

// The name upstream registers the file under; reflection clients see it.
const protoName = "process/v1/process.proto"
const goImport = "sandbox-operator/agent/upstream/processv1"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "protogen:", err)
		os.Exit(1)
	}
}

func run() error {
	outDir, err := filepath.Abs("../../agent/upstream/processv1")
	if err != nil {
		return err
	}
	src, err := os.ReadFile(filepath.Join(outDir, "process.proto"))
	if err != nil {
		return err
	}
	comp := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: protocompile.SourceAccessorFromMap(map[string]string{protoName: string(src)}),
		}),
		SourceInfoMode: protocompile.SourceInfoStandard,
	}
	files, err := comp.Compile(context.Background(), protoName)
	if err != nil {
		return err
	}
	// Dependencies first, as protoc orders proto_file.
	var protos []*descriptorpb.FileDescriptorProto
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := 0; i < imports.Len(); i++ {
			add(imports.Get(i).FileDescriptor)
		}
		protos = append(protos, protodesc.ToFileDescriptorProto(fd))
	}
	add(files[0])
	for _, plugin := range []string{"protoc-gen-go", "protoc-gen-go-grpc"} {
		param := "paths=source_relative,M" + protoName + "=" + goImport
		req := &pluginpb.CodeGeneratorRequest{FileToGenerate: []string{protoName}, Parameter: &param, ProtoFile: protos}
		in, err := proto.Marshal(req)
		if err != nil {
			return err
		}
		cmd := exec.Command("go", "tool", plugin)
		cmd.Stdin = bytes.NewReader(in)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("%s: %w", plugin, err)
		}
		var res pluginpb.CodeGeneratorResponse
		if err := proto.Unmarshal(out, &res); err != nil {
			return err
		}
		if res.Error != nil {
			return fmt.Errorf("%s: %s", plugin, res.GetError())
		}
		for _, f := range res.File {
			// paths=source_relative gives process/v1/process.pb.go; the package directory is flat.
			dst := filepath.Join(outDir, filepath.Base(f.GetName()))
			if err := os.WriteFile(dst, []byte(f.GetContent()), 0o644); err != nil {
				return err
			}
			fmt.Println("wrote", dst)
		}
	}
	return nil
}
