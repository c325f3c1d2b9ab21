// Command kube-lab is test infrastructure for the libvirt provider's local lab, never product code.
//
// One binary serves several roles, chosen by the first argument (or by the name it is run as, so a
// symlink called "kubectl" behaves as kubectl):
//
//	kube-lab pki --dir DIR            CA, serving and admin certificates, service-account keys, kubeconfig
//	kube-lab apiserver --etcd-dir D -- ARGS   embedded etcd plus an upstream kube-apiserver
//	kube-lab controller-manager ARGS  upstream kube-controller-manager (garbage collection, namespaces)
//	kube-lab kubectl ARGS             upstream kubectl of the same release
//	kube-lab scheduler ARGS           upstream kube-scheduler (only for the lab's node)
//	kube-lab kubelet ARGS             upstream kubelet (only for the lab's node)
//
// Building one binary from one pinned k8s.io/kubernetes release keeps kubectl, the API server and the
// controller manager on the same minor version and lets the Go linker share their common code.
package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap/zapcore"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	schedulerapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubeletapp "k8s.io/kubernetes/cmd/kubelet/app"

	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

func main() {
	if filepath.Base(os.Args[0]) == "kubectl" {
		os.Exit(runKubectl())
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kube-lab pki|apiserver|controller-manager|kubectl|scheduler|kubelet ...")
		os.Exit(2)
	}
	role := os.Args[1]
	// Each upstream command parses os.Args itself; make it look as if it had been run directly.
	os.Args = append([]string{role}, os.Args[2:]...)
	switch role {
	case "pki":
		os.Exit(runPKI(os.Args[1:]))
	case "apiserver":
		os.Exit(runAPIServer(os.Args[1:]))
	case "controller-manager":
		os.Exit(cli.Run(kcmapp.NewControllerManagerCommand()))
	case "kubectl":
		os.Exit(runKubectl())
	case "scheduler":
		os.Exit(cli.Run(schedulerapp.NewSchedulerCommand()))
	case "kubelet":
		os.Exit(cli.Run(kubeletapp.NewKubeletCommand(context.Background())))
	default:
		fmt.Fprintf(os.Stderr, "kube-lab: unknown role %q\n", role)
		os.Exit(2)
	}
}

func runKubectl() int {
	logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) //nolint:errcheck
	command := kubectlcmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		kubectlutil.CheckErr(err)
	}
	return 0
}

// runAPIServer starts an embedded etcd bound to loopback, then hands the remaining arguments to the
// upstream kube-apiserver command with --etcd-servers pointing at it.
func runAPIServer(args []string) int {
	etcdDir, etcdPort, rest, err := splitAPIServerArgs(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kube-lab apiserver:", err)
		return 2
	}
	etcd, err := startEtcd(etcdDir, etcdPort)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kube-lab apiserver: etcd:", err)
		return 1
	}
	defer etcd.Close()

	command := apiserverapp.NewAPIServerCommand()
	command.SetArgs(append(rest, fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcdPort)))
	return cli.Run(command)
}

func splitAPIServerArgs(args []string) (string, int, []string, error) {
	etcdDir, etcdPort := "", 0
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--etcd-dir":
			if i+1 >= len(args) {
				return "", 0, nil, fmt.Errorf("--etcd-dir needs a value")
			}
			etcdDir = args[i+1]
			i++
		case "--etcd-port":
			if i+1 >= len(args) {
				return "", 0, nil, fmt.Errorf("--etcd-port needs a value")
			}
			if _, err := fmt.Sscanf(args[i+1], "%d", &etcdPort); err != nil {
				return "", 0, nil, fmt.Errorf("--etcd-port: %w", err)
			}
			i++
		case "--":
			if etcdDir == "" || etcdPort == 0 {
				return "", 0, nil, fmt.Errorf("--etcd-dir and --etcd-port are required")
			}
			return etcdDir, etcdPort, args[i+1:], nil
		default:
			return "", 0, nil, fmt.Errorf("unexpected argument %q before --", args[i])
		}
	}
	return "", 0, nil, fmt.Errorf("missing -- before the kube-apiserver arguments")
}

func startEtcd(dir string, port int) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.Name = "lab"
	cfg.LogLevel = zapcore.WarnLevel.String()
	client, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", port))
	peer, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", port+1))
	cfg.ListenClientUrls = []url.URL{*client}
	cfg.AdvertiseClientUrls = []url.URL{*client}
	cfg.ListenPeerUrls = []url.URL{*peer}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.InitialCluster = fmt.Sprintf("%s=%s", cfg.Name, peer.String())
	cfg.ListenMetricsUrls = nil
	etcd, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	select {
	case <-etcd.Server.ReadyNotify():
		return etcd, nil
	case <-ctx.Done():
		etcd.Close()
		return nil, fmt.Errorf("not ready within 60s")
	}
}
