#include <gtest/gtest.h>

#include "ops/op.h"

TEST(Registry, HasAdd) { EXPECT_NE(jiffy::find_op("", "Add"), nullptr); }
