//! Single-precision matrix multiply over strided views.
