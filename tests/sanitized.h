/* SPDX-License-Identifier: MIT */
/*
 * tests/sanitized.h - KVP_SANITIZED: 1 when the test is built with
 * AddressSanitizer or ThreadSanitizer (timings and RSS mean nothing
 * there, and some tests skip).
 */
#ifndef KVP_TESTS_SANITIZED_H
#define KVP_TESTS_SANITIZED_H

/* gcc defines __SANITIZE_*__; clang only answers __has_feature. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KVP_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KVP_SANITIZED 1
#endif
#endif
#ifndef KVP_SANITIZED
#define KVP_SANITIZED 0
#endif

#endif /* KVP_TESTS_SANITIZED_H */
