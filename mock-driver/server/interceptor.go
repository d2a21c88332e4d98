package server

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	mockv1 "fenceline.io/fenceline/mock-driver/api/mock/v1"
	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/faults"
	"fenceline.io/fenceline/pkg/fence"
	"fenceline.io/fenceline/pkg/fence/fencev1"
)

// interceptor wraps every unary call of a socket: it logs the call with
// secrets stripped, applies injected latency and faults, runs the handler
// under the driver-wide order lock, appends the audit record before the
// next call can run, and records metrics.
func (sh *Shared) interceptor(sock Socket) grpc.UnaryServerInterceptor {
	base := sh.Logger.WithValues("endpoint", sock.Endpoint)
	if sock.NodeID != "" {
		base = base.WithValues("socketNode", sock.NodeID)
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		method := path.Base(info.FullMethod)
		logger := base.WithValues("method", method)
		ctx = klog.NewContext(ctx, logger)
		logger.V(2).Info("GRPC call", "request", protosanitizer.StripSecrets(redactAddonsSecrets(fence.RedactSecrets(req))))
		start := time.Now()

		// Latency is waited out before taking the order lock, so a slow
		// call does not hold up the others.
		fault := sh.Faults.Before(ctx, method)

		resp, err, auditErr := sh.applyInOrder(ctx, info.FullMethod, sock.NodeID, req, fault, handler)
		if auditErr != nil {
			logger.Error(auditErr, "Could not write the audit log")
		}
		if sh.Metrics != nil {
			sh.Metrics.RecordMetrics(method, err, time.Since(start))
		}
		if err != nil {
			logger.V(2).Info("GRPC error", "code", status.Code(err).String(), "err", err.Error())
		} else {
			logger.V(2).Info("GRPC response", "response", protosanitizer.StripSecrets(resp))
		}
		return resp, err
	}
}

// applyInOrder runs the handler (unless a fault answers instead) and
// appends the audit record, both under the order lock. A lost answer runs
// the handler to completion even if the client gave up, audits what the
// array did (marked Applied) and then answers the injected error.
func (sh *Shared) applyInOrder(ctx context.Context, fullMethod, socketNode string, req any, fault faults.Outcome, handler grpc.UnaryHandler) (resp any, err, auditErr error) {
	sh.order.Lock()
	defer sh.order.Unlock()
	if fault.Err != nil && !fault.Apply {
		return nil, fault.Err, sh.Audit.Append(auditRecord(fullMethod, socketNode, req, nil, fault.Err))
	}
	if fault.Apply {
		ctx = context.WithoutCancel(ctx)
	}
	resp, err = handler(ctx, req)
	if fault.Apply {
		rec := lostAnswer(auditRecord(fullMethod, socketNode, req, resp, err), err, fault.Err)
		return nil, fault.Err, sh.Audit.Append(rec)
	}
	return resp, err, sh.Audit.Append(auditRecord(fullMethod, socketNode, req, resp, err))
}

// lostAnswer turns the record of a call the array handled into that of its
// lost answer: the code the CO saw, what the array really answered in the
// message, and Applied when the array carried the call out.
func lostAnswer(rec audit.Record, handlerErr, answer error) audit.Record {
	rec.Code = status.Code(answer).String()
	if handlerErr == nil {
		rec.Applied = true
		rec.Message = status.Convert(answer).Message() + "; the array carried the call out, the answer was lost"
	} else {
		rec.Message = status.Convert(answer).Message() + "; the array refused the call: " + status.Convert(handlerErr).Message()
	}
	return rec
}

// auditRecord describes one answered call. Node calls and writes act as
// the socket's node; controller calls name the node of their request.
func auditRecord(fullMethod, socketNode string, req, resp any, err error) audit.Record {
	rec := audit.Record{
		Time:   time.Now(),
		Method: path.Base(fullMethod),
		Code:   status.Code(err).String(),
	}
	if strings.HasPrefix(fullMethod, "/csi.v1.Node/") || strings.HasPrefix(fullMethod, "/fenceline.mock.v1.Array/") {
		rec.NodeID = socketNode
	}
	if err != nil {
		rec.Message = status.Convert(err).Message()
	}
	if r, ok := req.(interface{ GetVolumeId() string }); ok {
		rec.VolumeID = r.GetVolumeId()
	}
	switch r := req.(type) {
	case *csi.CreateVolumeRequest:
		if v, ok := resp.(*csi.CreateVolumeResponse); ok {
			rec.VolumeID = v.GetVolume().GetVolumeId()
		}
		if err == nil {
			rec.Message = "name=" + r.GetName()
		}
	case *csi.ControllerPublishVolumeRequest:
		rec.NodeID = r.GetNodeId()
	case *csi.ControllerUnpublishVolumeRequest:
		rec.NodeID = r.GetNodeId()
		rec.Fence = fence.IsFenced(r)
	case *csi.NodeUnpublishVolumeRequest:
		rec.Force = fence.IsForcedUnpublish(r)
	case *csi.NodeUnstageVolumeRequest:
		rec.Force = fence.IsForcedUnstage(r)
	case *mockv1.WriteRequest:
		if err == nil {
			rec.Message = fmt.Sprintf("accepted %d bytes", len(r.GetData()))
		}
	case *fencev1.ListFencesRequest, *fencev1.LiftFenceRequest:
		fenceRecord(&rec, r, resp, err)
	default:
		addonsRecord(&rec, req)
	}
	return rec
}

// fenceRecord fills in the record of ListFences (the node filter, how many
// fences the page held) and LiftFence (the node, the volumes whose fences
// it lifted, the reason given). A lift's record is how a test or a checker
// learns that a quarantine ended by an operator's word rather than by the
// node's clean-up.
func fenceRecord(rec *audit.Record, req, resp any, err error) {
	switch r := req.(type) {
	case *fencev1.ListFencesRequest:
		rec.NodeID = r.GetNodeId()
		if l, ok := resp.(*fencev1.ListFencesResponse); ok && err == nil {
			rec.Message = fmt.Sprintf("fences=%d", len(l.GetEntries()))
		}
	case *fencev1.LiftFenceRequest:
		rec.NodeID = r.GetNodeId()
		if len(r.GetVolumeIds()) == 1 {
			rec.VolumeID = r.GetVolumeIds()[0]
		}
		if l, ok := resp.(*fencev1.LiftFenceResponse); ok && err == nil {
			var vols []string
			for _, f := range l.GetLifted() {
				vols = append(vols, f.GetVolumeIds()...)
			}
			rec.Lifted = strings.Join(vols, " ")
			if reason := r.GetReason(); reason != "" {
				rec.Message = "reason=" + reason
			}
		}
	}
}
