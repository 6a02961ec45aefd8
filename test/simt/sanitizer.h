// Whether this translation unit is built with AddressSanitizer, for the few places where the
// SIMT layer talks to it (stack switches, device-memory poisoning, error reports).
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIMT_ASAN 1
#endif
#endif

#ifndef SIMT_ASAN
#define SIMT_ASAN 0
#endif

#if SIMT_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
