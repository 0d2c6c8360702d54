/* entry_is_data.c — hostile fixture: exports `vigil_plugin_entry` as data (a
 * string), not a function. Calling it would jump into a non-executable page;
 * the host must check the symbol's ELF type and refuse it. (The header is not
 * included: it declares the symbol as the function it must be.) */
__attribute__((visibility("default"))) const char vigil_plugin_entry[] = "not a function";
