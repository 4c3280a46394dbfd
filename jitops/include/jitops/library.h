// SPDX-License-Identifier: MIT
// TORCH_LIBRARY blocks under the namespace an Extension declares, without typing it again: jitops
// compiles every extension with -DJITOPS_NAMESPACE=<namespace> and this folder on the include path.
//
//   #include <jitops/library.h>
//   JITOPS_LIBRARY(m) { m.def("scale(Tensor x, float factor) -> Tensor"); }
//   JITOPS_LIBRARY_IMPL(CPU, m) { m.impl("scale", &scale_cpu); }
//
// JITOPS_LIBRARY is a FRAGMENT, so one namespace may be split over several extensions of a package.
// Plain TORCH_LIBRARY(mypkg, m) keeps working.
#pragma once

#include <torch/library.h>

#ifndef JITOPS_NAMESPACE
#error "JITOPS_NAMESPACE is not defined: build this file as part of a jitops.Extension"
#endif

// One more level of macro, so that JITOPS_NAMESPACE is expanded before torch's macros paste it.
#define JITOPS_LIBRARY_FRAGMENT_IN_(ns, m) TORCH_LIBRARY_FRAGMENT(ns, m)
#define JITOPS_LIBRARY_IMPL_IN_(ns, k, m) TORCH_LIBRARY_IMPL(ns, k, m)
#define JITOPS_LIBRARY(m) JITOPS_LIBRARY_FRAGMENT_IN_(JITOPS_NAMESPACE, m)
#define JITOPS_LIBRARY_IMPL(k, m) JITOPS_LIBRARY_IMPL_IN_(JITOPS_NAMESPACE, k, m)
