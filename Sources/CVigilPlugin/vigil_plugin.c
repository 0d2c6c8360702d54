/* The contract is the header; this file only makes SwiftPM build the module
 * and checks, at compile time, that the header compiles as C11 with its
 * layout assertions. */
#include "vigil_plugin.h"
